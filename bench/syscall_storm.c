/* The synthetic kernel event source: calls getppid() at argv[1] calls per second (0: as fast as
 * possible) for argv[2] seconds. It prints its pid first and starts once a line arrives on
 * stdin, so the recorder can be told the pid (--bench-source-pid) and attach before the first
 * call; then it prints the calls made, the mean ns per call and the seconds it ran. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: syscall_storm CALLS_PER_S SECONDS\n");
        return 2;
    }
    double rate = atof(argv[1]), seconds = atof(argv[2]);
    printf("%d\n", getpid());
    fflush(stdout);
    char go[16];
    if (!fgets(go, sizeof go, stdin))
        return 1;
    const long batch = 1000;
    long calls = 0;
    double busy = 0, start = now(), end = start + seconds;
    while (now() < end) {
        double b = now();
        for (long i = 0; i < batch; i++)
            syscall(SYS_getppid);
        busy += now() - b;
        calls += batch;
        if (rate > 0) {
            double due = start + calls / rate, t = now();
            if (due > t) {
                struct timespec d = {(time_t)(due - t), (long)((due - t - (time_t)(due - t)) * 1e9)};
                nanosleep(&d, 0);
            }
        }
    }
    printf("%ld %.1f %.3f\n", calls, busy * 1e9 / calls, now() - start);
    return 0;
}
