/* The loop both synthetic sources share: CALL, a statement using the loop index `i`, in
 * batches of 1000 at RATE calls per second (0: as fast as possible) for SECONDS; then prints
 * the calls made, the mean ns per call (time in the calls only) and the seconds it ran. A
 * macro, not a function taking a callback: the uprobe source's untraced call costs ~1.5 ns, and
 * an indirect call would be part of it. */
#ifndef PACED_H
#define PACED_H
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

#define PACED_LOOP(RATE, SECONDS, CALL)                                                             \
    do {                                                                                            \
        const long batch = 1000;                                                                    \
        long calls = 0;                                                                             \
        double busy = 0, start = now(), end = start + (SECONDS);                                    \
        while (now() < end) {                                                                       \
            double b = now();                                                                       \
            for (long i = 0; i < batch; i++) {                                                      \
                CALL;                                                                               \
            }                                                                                       \
            busy += now() - b;                                                                      \
            calls += batch;                                                                         \
            if ((RATE) > 0) {                                                                       \
                double due = start + calls / (RATE), t = now();                                     \
                if (due > t) {                                                                      \
                    struct timespec d = {(time_t)(due - t), (long)((due - t - (time_t)(due - t)) * 1e9)}; \
                    nanosleep(&d, 0);                                                               \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        printf("%ld %.1f %.3f\n", calls, busy * 1e9 / calls, now() - start);                        \
    } while (0)

#endif
