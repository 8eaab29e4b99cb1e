/* Runs the no_std self-test of fsoc-core (src/lib.rs) and reports its result. */
#include <stdio.h>

int fsoc_no_std_selftest(void);

int main(void) {
    int failed_step = fsoc_no_std_selftest();
    if (failed_step != 0) {
        fprintf(stderr, "no_std self-test failed at step %d\n", failed_step);
        return 1;
    }
    printf("no_std self-test: format, write, remount, read back: ok\n");
    return 0;
}
