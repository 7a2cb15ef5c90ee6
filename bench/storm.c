/* Calls ncclAllReduce of the library given as argv[1] at argv[2] calls per second (0: as fast
 * as possible) for argv[3] seconds; prints the calls made and the mean ns per call. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "paced.h"

typedef int (*allreduce_t)(const void *, void *, size_t, int, int, void *, void *);

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
    PACED_LOOP(rate, seconds, f(0, 0, (size_t)i, 7, 0, (void *)0x1000, 0));
    return 0;
}
