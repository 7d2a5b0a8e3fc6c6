package verbs

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLockedMemoryCause(t *testing.T) {
	const page = 4096
	limited := memlockState{soft: 64 << 10, hard: 64 << 10, pinned: 0}
	for _, tc := range []struct {
		name   string
		s      memlockState
		errno  syscall.Errno
		region int
		want   bool
	}{
		{"OverTheLimit", limited, syscall.ENOMEM, 132 << 10, true},
		{"OverWithEPERM", limited, syscall.EPERM, 132 << 10, true},
		{"OverWithEAGAIN", limited, syscall.EAGAIN, 132 << 10, true},
		{"OtherErrno", limited, syscall.EINVAL, 132 << 10, false},
		{"Fits", limited, syscall.ENOMEM, 64 << 10, false},
		{"FitsOnlyWithoutWhatIsPinned", memlockState{soft: 64 << 10, hard: 1 << 20, pinned: 8 << 10}, syscall.ENOMEM, 60 << 10, true},
		{"PinnedUnknown", memlockState{soft: 64 << 10, hard: 64 << 10, pinned: -1}, syscall.ENOMEM, 4 << 10, true},
		{"Unlimited", memlockState{soft: unix.RLIM_INFINITY, hard: unix.RLIM_INFINITY}, syscall.ENOMEM, 132 << 10, false},
		{"Exempt", memlockState{soft: 64 << 10, hard: 64 << 10, exempt: true}, syscall.ENOMEM, 132 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.s.cause(tc.errno, tc.region, page)
			if (got != nil) != tc.want {
				t.Fatalf("cause = %v, want a locked-memory cause: %v", got, tc.want)
			}
			if got != nil && (got.Soft != tc.s.soft || got.Hard != tc.s.hard || got.Pinned != tc.s.pinned || got.Region != tc.region) {
				t.Errorf("cause = %+v, want it to carry %+v and region %d", got, tc.s, tc.region)
			}
		})
	}
}

func TestLockedMemoryErrorText(t *testing.T) {
	lm := &LockedMemoryError{Soft: 64 << 10, Hard: 64 << 10, Pinned: 0, Region: 132 << 10, Needed: 264 << 10}
	err := error(&Error{Op: "ibv_reg_mr", Device: "rxe0", Errno: syscall.ENOMEM, Err: lm})
	if !errors.Is(err, ErrLockedMemory) || !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("%v: want ErrLockedMemory and ENOMEM", err)
	}
	var got *LockedMemoryError
	if !errors.As(err, &got) || got != lm {
		t.Errorf("%v: errors.As does not find the *LockedMemoryError", err)
	}
	for _, want := range []string{"ibv_reg_mr rxe0: ", "RLIMIT_MEMLOCK is 64 KiB", "hard limit 64 KiB", "0 B already pinned",
		"a connection pins 264 KiB", "ulimit -l", "--ulimit memlock=-1", "LimitMEMLOCK=", "(cannot allocate memory)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	lm.Needed, lm.Pinned = 0, -1
	if s := lm.Error(); !strings.Contains(s, "this region needs 132 KiB") || strings.Contains(s, "pinned") {
		t.Errorf("without Needed and Pinned: %q", s)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 300: "300 B", 1023: "1023 B", 1 << 10: "1 KiB", 64 << 10: "64 KiB", 264 << 10: "264 KiB",
		8 << 20: "8 MiB", 3 << 29: "1.5 GiB", 1<<63 + 1<<62: "12 EiB", unix.RLIM_INFINITY: "unlimited",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// The process's own state reads without error; on a host where the test
// runs as root it is exempt, elsewhere it is not, and both are fine.
func TestMemlockStateReads(t *testing.T) {
	if p := pinnedBytes(); p < 0 {
		t.Errorf("pinnedBytes = %d: VmPin not read from /proc/self/status", p)
	}
	t.Logf("exempt from RLIMIT_MEMLOCK: %v; in the initial user namespace: %v", exemptFromLockedMemoryLimit(), inInitialUserNamespace())
}
