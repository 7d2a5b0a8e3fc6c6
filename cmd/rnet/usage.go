package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// command is one of rnet's commands.
type command struct {
	name     string
	synopsis string // after "usage: ", in `rnet help` and under a usage error
	summary  string // what it does, in `rnet help`'s list
	about    string // `rnet help NAME`'s text between the synopsis and the flags
	// flags defines the command's flags, with their defaults, for help.
	flags func() *flag.FlagSet
	// run parses args and runs the command; it fills in where it talks
	// to, for a JSON error.
	run func(args []string, stdout, stderr io.Writer, where *target) error
}

// target is what a command serves or talks to, for its JSON error.
type target struct {
	addr      string
	transport string
}

// commands are rnet's commands, in the order `rnet help` lists them.
var commands = []command{
	devicesCommand,
	perfCommand,
	pingCommand,
	scaleCommand,
	statCommand,
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// printUsage prints `rnet help`: the commands and what they do.
func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage:")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.synopsis, c.summary)
	}
	fmt.Fprintf(tw, "  rnet help [COMMAND]\tthis list, or a command's flags (also -h, --help)\n")
	fmt.Fprintf(tw, "  rnet version\tthe version rnet was built from (also -v, --version)\n")
	tw.Flush()
	fmt.Fprint(w, `
Sizes take K, M, G and T, powers of 1024 (4K = 4KiB = 4KB = 4096), and fractions: -n 1.5G.
-d DEVICE picks an RDMA device by name (rxe0, mlx5_0), as -from IP does by address.
Run 'rnet help COMMAND' for a command's flags.
`)
}

// printHelp prints `rnet help NAME`: the synopsis, what the command does,
// and its flags.
func printHelp(w io.Writer, c command) {
	fmt.Fprintf(w, "usage: %s\n\n%s\nflags:\n", c.synopsis, c.about)
	fs := c.flags()
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// printUsageError prints a command-line mistake and the two lines that say
// how the command is used, never its whole flag list.
func printUsageError(w io.Writer, name string, err error) {
	c, ok := lookupCommand(name)
	if !ok {
		fmt.Fprintf(w, "rnet: %v\nusage: rnet COMMAND [flags]\nrun 'rnet help' for the commands\n", err)
		return
	}
	fmt.Fprintf(w, "rnet %s: %v\nusage: %s\nrun 'rnet help %s' for its flags\n", name, err, c.synopsis, name)
}

// errUsage marks a command-line mistake (exit status 2).
var errUsage = errors.New("usage")

// usageError is a command-line mistake and what is wrong.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

func usageErrorf(format string, a ...any) error {
	return usageError{fmt.Sprintf(format, a...)}
}

// newFlagSet is a command's flag set: it prints nothing itself, since run
// prints help on stdout and mistakes in two lines on stderr.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("rnet "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseInterleaved parses flags that may come before and after positional
// arguments ("perf -s 10.0.0.1 --json"), returning the positionals. -h and
// --help give flag.ErrHelp.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// flagSet reports whether the command line set the named flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// undefinedFlag is the flag an error of fs.Parse says is not defined, if
// that is the error.
func undefinedFlag(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	return strings.TrimLeft(name, "-"), ok
}
