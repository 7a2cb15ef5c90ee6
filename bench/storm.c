/* Calls ncclAllReduce of the library given as argv[1] at argv[2] calls per second (0: as fast
 * as possible) for argv[3] seconds; prints the calls made and the mean ns per call. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*allreduce_t)(const void *, void *, size_t, int, int, void *, void *);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: storm LIB CALLS_PER_S SECONDS\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    allreduce_t f = (allreduce_t)dlsym(lib, "ncclAllReduce");
    double rate = atof(argv[2]), seconds = atof(argv[3]);
    const long batch = 1000;
    long calls = 0;
    double busy = 0, start = now(), end = start + seconds;
    while (now() < end) {
        double b = now();
        for (long i = 0; i < batch; i++)
            f(0, 0, (size_t)i, 7, 0, (void *)0x1000, 0);
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
