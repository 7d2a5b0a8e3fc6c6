// Package extest runs an example program's main, from its own test binary, as
// a server and a client in two processes, so the examples are tested as users
// run them: flags, output and exit code.
package extest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

const childEnv = "RNET_EXAMPLE_RUN_MAIN"

// MainIfChild is called from TestMain: in a child started by Server or
// Client it runs the program's main (which parses os.Args as usual) and exits
// 0 when main returns.
func MainIfChild(main func()) {
	if os.Getenv(childEnv) == "1" {
		main()
		os.Exit(0)
	}
}

func command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	return cmd
}

var listenLine = regexp.MustCompile(`(?:listening on|serving .* on) (\S+) `)

// Server starts the program with args (which should include -s, -once and an
// address with port 0), waits until it prints the address it listens on and
// returns that address and a function that waits for the server to exit and
// returns its output. A server that does not exit 0 fails the test.
func Server(t *testing.T, args ...string) (addr string, wait func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel) // a test that fails early does not leave the server running
	cmd := command(ctx, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
			break
		}
	}
	if addr == "" {
		cmd.Wait()
		cancel()
		t.Fatalf("server %v did not say where it listens:\n%s%s", args, log.String(), stderr.String())
	}
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		rest <- b.String()
	}()
	return addr, func() string {
		t.Helper()
		defer cancel()
		tail := <-rest
		err := cmd.Wait()
		all := log.String() + tail + stderr.String()
		if err != nil {
			t.Fatalf("server %v: %v\n%s", args, err, all)
		}
		return all
	}
}

// Client runs the program with args and returns its output; a non-zero exit
// fails the test.
func Client(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := command(ctx, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("client %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Result returns the fields of the RESULT line in out, failing the test if
// there is none.
func Result(t *testing.T, out string) map[string]string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			f := map[string]string{}
			for _, kv := range strings.Fields(rest) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					f[k] = v
				}
			}
			return f
		}
	}
	t.Fatalf("no RESULT line in:\n%s", out)
	return nil
}
