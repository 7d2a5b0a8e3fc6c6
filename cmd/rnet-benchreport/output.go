package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func replotFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return write(&r, filepath.Dir(path), os.Stdout)
}

func write(r *Report, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var table strings.Builder
	r.WriteTable(&table)
	fmt.Fprint(stdout, table.String())
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.txt"), []byte(table.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "bench.svg"))
	if err != nil {
		return err
	}
	if err := r.WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s/bench.json, bench.txt and bench.svg\n", dir)
	return f.Close()
}
