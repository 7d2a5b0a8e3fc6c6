package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// errUsage marks a command-line mistake (exit status 2); the message has
// already been printed.
var errUsage = errors.New("usage")

// usageError is a command-line mistake with its message, for --json.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

// printHelp prints a command's usage line and its flags.
func printHelp(w io.Writer, text string, fs *flag.FlagSet) {
	fmt.Fprint(w, text+"\nflags:\n")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// parseInterleaved parses flags that may come before and after positional
// arguments ("perf -s 10.0.0.1 --json"), returning the positionals.
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

func usageErr(w io.Writer, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	fmt.Fprintln(w, "rnet: "+msg)
	return usageError{msg}
}

// flagSet reports whether the command line set the named flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
