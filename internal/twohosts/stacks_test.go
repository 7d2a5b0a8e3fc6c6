package twohosts

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/pprof"
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
