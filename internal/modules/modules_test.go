package modules

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// coreModule is the module path of the go.mod at the repository root.
const coreModule = "github.com/rnet-dev/rnet"

// modFile is what the check reads from one go.mod.
type modFile struct {
	path      string // relative to the repository root
	module    string
	goVersion string
	toolchain string
	xsys      string // the version of golang.org/x/sys it requires, or ""
}

// parseModFile reads the module, go and toolchain lines and the
// golang.org/x/sys requirement, single-line or inside a require block.
func parseModFile(path string) (modFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return modFile{}, err
	}
	defer f.Close()
	m := modFile{path: path}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "//")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "module":
			if len(fields) == 2 {
				m.module = fields[1]
			}
			continue
		case "go":
			if len(fields) == 2 {
				m.goVersion = fields[1]
			}
			continue
		case "toolchain":
			if len(fields) == 2 {
				m.toolchain = fields[1]
			}
			continue
		case "require":
			fields = fields[1:]
		}
		if len(fields) == 2 && fields[0] == "golang.org/x/sys" {
			m.xsys = fields[1]
		}
	}
	return m, s.Err()
}

// repoRoot is the directory of the core module's go.mod, two levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	core, err := parseModFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if core.module != coreModule {
		t.Fatalf("%s/go.mod is module %q, want %q", root, core.module, coreModule)
	}
	return root
}

// modFiles finds every go.mod under root as the Makefile does: outside
// .git and testdata directories.
func modFiles(t *testing.T, root string) []modFile {
	t.Helper()
	var mods []modFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		m, err := parseModFile(path)
		if err != nil {
			return err
		}
		m.path, err = filepath.Rel(root, path)
		mods = append(mods, m)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

func TestModulesAgreeWithCore(t *testing.T) {
	root := repoRoot(t)
	mods := modFiles(t, root)
	var core modFile
	for _, m := range mods {
		if m.path == "go.mod" {
			core = m
		}
	}
	if core.goVersion == "" || core.xsys == "" {
		t.Fatalf("go.mod at the root states go %q and golang.org/x/sys %q; want both", core.goVersion, core.xsys)
	}
	if len(mods) < 2 {
		t.Fatalf("found %d go.mod files under %s; want the core and its nested modules", len(mods), root)
	}
	for _, m := range mods {
		if m.goVersion != core.goVersion {
			t.Errorf("%s: go %s, want go %s as the core's go.mod (a nested module must build with the core's toolchain)", m.path, m.goVersion, core.goVersion)
		}
		if m.toolchain != core.toolchain {
			t.Errorf("%s: toolchain %q, want %q as the core's go.mod", m.path, m.toolchain, core.toolchain)
		}
		if m.xsys != "" && m.xsys != core.xsys {
			t.Errorf("%s: golang.org/x/sys %s, want %s as the core's go.mod (pick dependency versions that need no newer one)", m.path, m.xsys, core.xsys)
		}
	}
}

func TestParseModFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "go.mod")
	text := `module example.com/m // a comment

go 1.25.0

toolchain go1.26.0

require (
	example.com/other v1.0.0
	golang.org/x/sys v0.30.0 // indirect
)
`
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := parseModFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := modFile{path: path, module: "example.com/m", goVersion: "1.25.0", toolchain: "go1.26.0", xsys: "v0.30.0"}
	if m != want {
		t.Errorf("parseModFile = %+v, want %+v", m, want)
	}

	if err := os.WriteFile(path, []byte("module m\ngo 1.25.0\nrequire golang.org/x/sys v0.31.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err = parseModFile(path); err != nil || m.xsys != "v0.31.0" {
		t.Errorf("single-line require: x/sys %q, err %v; want v0.31.0", m.xsys, err)
	}
}
