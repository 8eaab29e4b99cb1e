/* Runs probe_workload on a painted stack of its own and prints what it used:
 * "stack_bytes heap_peak_bytes state_bytes". */
#define _XOPEN_SOURCE 700
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "probe.h"

#define STACK_BYTES (1 << 20)
#define PAINT 0xA5

static ucontext_t caller, worker;
static ProbeRam ram;
static int answer = -1;

static void run(void) { answer = probe_workload(&ram); }

int main(void) {
    unsigned char *stack = malloc(STACK_BYTES);
    if (stack == NULL) return 1;
    memset(stack, PAINT, STACK_BYTES);
    getcontext(&worker);
    worker.uc_stack.ss_sp = stack;
    worker.uc_stack.ss_size = STACK_BYTES;
    worker.uc_link = &caller;
    makecontext(&worker, run, 0);
    if (swapcontext(&caller, &worker) != 0 || answer != 0) {
        fprintf(stderr, "the workload failed (%d)\n", answer);
        return 1;
    }
    /* The stack grows down: the lowest byte no longer painted is its deepest point. */
    size_t untouched = 0;
    while (untouched < STACK_BYTES && stack[untouched] == PAINT) untouched++;
    printf("%zu %zu %zu\n", (size_t)STACK_BYTES - untouched, ram.heap_peak_bytes, ram.state_bytes);
    return 0;
}
