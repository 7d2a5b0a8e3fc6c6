package twohosts

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// dumpStacksAfterMark prints, FAULT_SERVER_STACKS after the server's mark
// (if set), its goroutines grouped by stack, each line prefixed
// "diag-goroutines": where a thawed host's connections wait.
func dumpStacksAfterMark(m *stallMeter) {
	after, err := time.ParseDuration(os.Getenv("FAULT_SERVER_STACKS"))
	if err != nil {
		return
	}
	<-m.marked
	for _, at := range []time.Duration{after, 2 * after} {
		time.Sleep(at - m.sinceMark()) // a pause until the dump's time after the mark
		var buf bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&buf, 1)
		sc := bufio.NewScanner(&buf)
		for sc.Scan() {
			fmt.Printf("diag-goroutines %v %s\n", at, sc.Text())
		}
	}
}

// profileAfterMark writes a CPU profile of the process's first
// FAULT_PROFILE_FOR (default 10 s) after the mark to FAULT_PROFILE-ROLE.pprof,
// relative to the working directory (the host's, shared with the guest):
// where a host's time goes while its connections move; and where its
// goroutines waited on each other's locks then, to ...-mutex.pprof.
func profileAfterMark(marked <-chan struct{}) {
	prefix, span := os.Getenv("FAULT_PROFILE"), envDuration("FAULT_PROFILE_FOR", 10*time.Second)
	if prefix == "" {
		return
	}
	path := prefix + "-" + os.Getenv("RNET_TWOHOSTS_ROLE") + ".pprof"
	<-marked
	f, err := os.Create(path)
	if err != nil {
		fmt.Println("diag-profile:", err)
		return
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Println("diag-profile:", err)
		return
	}
	runtime.SetMutexProfileFraction(1)
	time.Sleep(span) // the profile's span, not a synchronisation
	pprof.StopCPUProfile()
	runtime.SetMutexProfileFraction(0)
	// Where goroutines waited for one another's locks meanwhile.
	if m, err := os.Create(strings.TrimSuffix(path, ".pprof") + "-mutex.pprof"); err == nil {
		pprof.Lookup("mutex").WriteTo(m, 0)
		m.Close()
	}
}
