/* The synthetic kernel event source: calls getppid() at argv[1] calls per second (0: as fast as
 * possible) for argv[2] seconds. It prints its pid first and starts once a line arrives on
 * stdin, so the recorder can be told the pid (--bench-source-pid) and attach before the first
 * call; then it prints the calls made, the mean ns per call and the seconds it ran. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "paced.h"

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
    PACED_LOOP(rate, seconds, syscall(SYS_getppid));
    return 0;
}
