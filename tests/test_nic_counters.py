"""NIC counters: a prepared sysfs tree with known increments, and the live counters of a veth
during a real transfer."""
import subprocess
import sys
import time

from netlab import CLIENT, Recorder, RootLink, Server

MB = 1 << 20


def test_prepared_tree_increments_become_deltas(tmp_path):
    sysfs = tmp_path / "sys"
    hw = sysfs / "class/infiniband/mlx5_0/ports/1/hw_counters"
    hw.mkdir(parents=True)
    (hw / "out_of_sequence").write_text("0\n")
    (hw / "np_cnp_sent").write_text("10\n")
    stats = sysfs / "class/net/ens1f0/statistics"
    stats.mkdir(parents=True)
    (stats / "rx_dropped").write_text("1\n")
    rec = Recorder(tmp_path / "out", "--sysfs-root", str(sysfs), "--nic-interval", "100ms", "--no-gpu", "--port", "1")
    time.sleep(0.5)
    (hw / "out_of_sequence").write_text("5\n")
    (hw / "np_cnp_sent").write_text("30\n")
    time.sleep(0.5)
    assert rec.stop() == 0, rec.stderr
    rows = rec.query("""SELECT device, port, source, counter, value, delta FROM read_parquet('%s/nic_counters/*.parquet')
                        ORDER BY counter, value""" % rec.out)
    by_counter = {}
    for device, port, source, counter, value, delta in rows:
        by_counter.setdefault(counter, []).append((device, port, source, value, delta))
    assert by_counter["out_of_sequence"] == [("mlx5_0", 1, "ib_hw", 0, None), ("mlx5_0", 1, "ib_hw", 5, 5)]
    assert by_counter["np_cnp_sent"] == [("mlx5_0", 1, "ib_hw", 10, None), ("mlx5_0", 1, "ib_hw", 30, 20)]
    assert by_counter["rx_dropped"] == [("ens1f0", None, "net", 1, None)]  # never changed: one row


def test_live_veth_counters_see_the_transfer(tmp_path):
    link = RootLink()
    try:
        rec = Recorder(tmp_path, "--cidr", link.cidr, "--nic-interval", "200ms", "--no-gpu")
        server = Server(link, 5501)
        client = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", CLIENT, link.b_ip, "5501", str(8 * MB), "0.5"],
                                capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stderr
        assert server.received() == [8 * MB]
        assert rec.stop() == 0, rec.stderr
        sent = rec.query(f"""SELECT sum(delta), max(rate_per_s) FROM read_parquet('{rec.out}/nic_counters/*.parquet')
                             WHERE device = '{link.root_dev}' AND counter = 'tx_bytes'""")[0]
        assert sent[0] >= 8 * MB, sent
        assert sent[1] > 0
        flow_bytes = rec.query(f"SELECT bytes_sent FROM flows WHERE remote_addr = '{link.b_ip}'")[0][0]
        # The interface carried the flow's payload plus headers.
        assert sent[0] >= flow_bytes
    finally:
        link.close()
