/* Preloaded before libfaketime in the clock-step fault test (test_cluster_faults.py).
 *
 * libfaketime 0.9.10 (Debian bookworm) with DONT_FAKE_MONOTONIC=1 turns an absolute
 * CLOCK_MONOTONIC deadline of clock_nanosleep() into a negative one, so every time.sleep() of
 * Python >= 3.11 fails with EINVAL (wolfcw/libfaketime#426, fixed after 0.9.10). The monotonic
 * clock is not faked there, so such a sleep goes straight to the kernel; every other clock
 * goes on to libfaketime (the next definition). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_nanosleep(clockid_t clock_id, int flags, const struct timespec *req,
                    struct timespec *rem) {
    if (clock_id == CLOCK_MONOTONIC) {
        return syscall(SYS_clock_nanosleep, clock_id, flags, req, rem) == 0 ? 0 : errno;
    }
    static int (*next)(clockid_t, int, const struct timespec *, struct timespec *);
    if (next == NULL) {
        next = dlsym(RTLD_NEXT, "clock_nanosleep");
    }
    return next(clock_id, flags, req, rem);
}
