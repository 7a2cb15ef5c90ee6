"""A real PyTorch DDP training job for the diagnosis lab (tests/ddplab.py): gloo on CPU, TCP
rendezvous, a small MLP in DistributedDataParallel with small gradient buckets (several
all-reduces per step), the PyTorch profiler writing a Kineto Chrome trace per rank, and each
rank's own step times as ground truth.

    python3 tests/ddp_train.py --rank 0 --world-size 4 --master-addr 10.203.1.1 \
        --steps 60 --trace-dir TRACES --truth-dir TRUTH [--slow-rank 2 --slow-ms 40] \
        [--fault-from-step 30 --fault-flag RUN/fault-now]

Ground truth (TRUTH/rank<R>.json): rank, world size, host name, and for every step its wall
start and end in UTC nanoseconds (time.time_ns()), the steps the profiler recorded, and the
planted slowness if any. A step is forward + loss + backward (the DDP all-reduces) + optimizer.

A fault can start mid-run (`--fault-from-step N`), so that the steps before it are the same run's
healthy baseline: the slow rank starts its extra work at step N, and rank 0 creates the
`--fault-flag` file as step N starts, for the lab to plant a network fault then (without waiting
for it: the job never pauses for the lab).
"""
import argparse
import datetime
import json
import os
import socket
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--local-rank", type=int, default=0)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--hidden", type=int, default=512, help="width of the hidden layers")
    p.add_argument("--layers", type=int, default=4, help="number of hidden layers")
    p.add_argument("--batch", type=int, default=32, help="per-rank batch size")
    p.add_argument("--bucket-cap-mb", type=float, default=1.0,
                   help="DDP gradient bucket size; small buckets give several all-reduces per step")
    p.add_argument("--profile-skip", type=int, default=3,
                   help="steps before the profiler records (warmup: connection setup, allocator)")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="steps the profiler records (0: every step after the skipped ones)")
    p.add_argument("--trace-dir", required=True, help="where rank<R>.pt.trace.json is written")
    p.add_argument("--truth-dir", required=True, help="where rank<R>.json (ground truth) is written")
    p.add_argument("--slow-rank", type=int, default=None, help="this rank does extra work every step")
    p.add_argument("--slow-ms", type=float, default=0.0, help="milliseconds of extra work per step")
    p.add_argument("--slow-mode", choices=("busy", "sleep"), default="busy",
                   help="busy: CPU work (a slow data loader computing); sleep: waiting (slow storage)")
    p.add_argument("--fault-from-step", type=int, default=0,
                   help="the first step with the planted fault (0: every step)")
    p.add_argument("--fault-flag", default=None,
                   help="rank 0 creates this file as step --fault-from-step starts (the lab plants the fault)")
    p.add_argument("--timeout-s", type=float, default=180.0, help="collective and rendezvous timeout")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def extra_work(ms, mode):
    """The planted straggler: ms of busy CPU (or of waiting) before the backward pass."""
    if ms <= 0:
        return
    if mode == "sleep":
        time.sleep(ms / 1000)
        return
    end = time.perf_counter() + ms / 1000
    x = 1.0
    while time.perf_counter() < end:
        for _ in range(200):
            x = x * 1.0000001 + 1e-9


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    os.makedirs(args.trace_dir, exist_ok=True)
    os.makedirs(args.truth_dir, exist_ok=True)

    t_init = time.time_ns()
    dist.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{args.master_port}",
                            rank=args.rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    layers, width = [], 64
    for _ in range(args.layers):
        layers += [torch.nn.Linear(width, args.hidden), torch.nn.ReLU()]
        width = args.hidden
    layers.append(torch.nn.Linear(width, 10))
    model = DDP(torch.nn.Sequential(*layers), bucket_cap_mb=args.bucket_cap_mb)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1000 + args.rank)  # each rank its own data
    slow = args.slow_rank == args.rank and args.slow_ms > 0

    trace_path = os.path.join(args.trace_dir, f"rank{args.rank}.pt.trace.json")
    active = args.profile_steps or max(1, args.steps - args.profile_skip)
    schedule = torch.profiler.schedule(wait=max(0, args.profile_skip - 1), warmup=1, active=active, repeat=1)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                  on_trace_ready=lambda p: p.export_chrome_trace(trace_path))
    dist.barrier()  # every rank connected: step 0 starts together
    t_ready = time.time_ns()
    steps = []
    with prof:
        for step in range(args.steps):
            start = time.time_ns()
            if step == args.fault_from_step and args.fault_flag and args.rank == 0:
                with open(args.fault_flag, "w") as f:
                    f.write(f"{step} {start}\n")
            x = torch.randn(args.batch, 64, generator=gen)
            y = torch.randint(0, 10, (args.batch,), generator=gen)
            out = model(x)
            loss = loss_fn(out, y)
            if slow and step >= args.fault_from_step:
                with torch.profiler.record_function("slow_rank_extra_work"):
                    extra_work(args.slow_ms, args.slow_mode)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradient buckets here
            opt.step()
            end = time.time_ns()
            steps.append({"step": step, "start_ns": start, "end_ns": end})
            prof.step()
    dist.barrier()
    t_done = time.time_ns()
    first_profiled = max(0, args.profile_skip)
    truth = {
        "rank": args.rank,
        "local_rank": args.local_rank,
        "world_size": args.world_size,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "master": f"{args.master_addr}:{args.master_port}",
        "model": {"hidden": args.hidden, "layers": args.layers, "params": params,
                  "grad_bytes": params * 4, "bucket_cap_mb": args.bucket_cap_mb, "batch": args.batch},
        "slow": {"rank": args.slow_rank, "ms": args.slow_ms, "mode": args.slow_mode} if args.slow_rank is not None else None,
        "fault_from_step": args.fault_from_step,
        "init_start_ns": t_init,
        "ready_ns": t_ready,
        "done_ns": t_done,
        "profiled_steps": list(range(first_profiled, min(args.steps, first_profiled + active))),
        "trace": trace_path if os.path.exists(trace_path) else None,
        "steps": steps,
    }
    tmp = os.path.join(args.truth_dir, f".rank{args.rank}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(truth, f)
    os.rename(tmp, os.path.join(args.truth_dir, f"rank{args.rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
