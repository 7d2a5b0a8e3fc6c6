package examples_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	// The README's snippets use these: keep them in this module's requirements.
	_ "github.com/hashicorp/yamux"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rnet-dev/rnet/rnet/rnetprom"
)

// readmeImports are the packages README snippets may use without importing
// them, by the name they are used under.
var readmeImports = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"grpc":       "google.golang.org/grpc",
	"http":       "net/http",
	"insecure":   "google.golang.org/grpc/credentials/insecure",
	"io":         "io",
	"log":        "log",
	"net":        "net",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"rnet":       "github.com/rnet-dev/rnet/rnet",
	"rnetgrpc":   "github.com/rnet-dev/rnet/rnet/rnetgrpc",
	"rnetprom":   "github.com/rnet-dev/rnet/rnet/rnetprom",
	"rnettest":   "github.com/rnet-dev/rnet/rnet/rnettest",
	"time":       "time",
	"yamux":      "github.com/hashicorp/yamux",
}

// readmeFree are the names snippets use as if a program around them had
// declared them.
const readmeFree = `var (
	grpcServer *grpc.Server
	conn       net.Conn
	ln         *rnet.Listener
	err        error
)
`

// TestREADMEGoBlocksCompile builds every Go block of the repository's
// README, so that a sample a reader copies compiles: a whole program as it
// is, a snippet inside a function with the imports it uses.
func TestREADMEGoBlocksCompile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	blocks := goBlocks(t, filepath.Join("..", "README.md"))
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go blocks")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// The blocks become packages of this module only in an overlay, so the
	// source tree stays as it is and the module's requirements resolve them.
	overlay := map[string]map[string]string{"Replace": {}}
	var pkgs []string
	for i, b := range blocks {
		src, err := blockSource(b.text)
		if err != nil {
			t.Fatalf("README.md:%d: %v", b.line, err)
		}
		tmp := filepath.Join(t.TempDir(), "main.go")
		if err := os.WriteFile(tmp, src, 0o644); err != nil {
			t.Fatal(err)
		}
		dir := fmt.Sprintf("readmeblock%02d", i)
		overlay["Replace"][filepath.Join(wd, "internal", dir, "main.go")] = tmp
		pkgs = append(pkgs, "./internal/"+dir)
		t.Logf("README.md:%d: block %s", b.line, dir)
	}
	js, err := json.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(t.TempDir(), "overlay.json")
	if err := os.WriteFile(ov, js, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", ov, "-o", os.DevNull}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of README's Go blocks: %v\n%s", err, out)
	}
}

type goBlock struct {
	line int // the line of the block's first code line
	text string
}

// goBlocks returns the ```go blocks of a Markdown file.
func goBlocks(t *testing.T, path string) []goBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []goBlock
	var cur *goBlock
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &goBlock{line: n + 1}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: a Go block that never ends", path, cur.line)
	}
	return blocks
}

// blockSource makes a block a compilable file: a program as it is; a
// snippet as the body of a function, each name it declares used once (a
// reader's program would go on to use them), with the imports it names.
func blockSource(text string) ([]byte, error) {
	if strings.HasPrefix(strings.TrimSpace(text), "package ") {
		return []byte(text), nil
	}
	body := "func snippet() {\n" + text + "}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", "package readme\n"+readmeFree+body, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("the snippet does not parse as a function body: %w", err)
	}
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Name.Name == "snippet" {
			fn = d
		}
	}
	declared := map[string]bool{}
	for _, st := range fn.Body.List {
		if as, ok := st.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
			for _, l := range as.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
					declared[id.Name] = true
				}
			}
		}
		if ds, ok := st.(*ast.DeclStmt); ok {
			if gd, ok := ds.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						declared[id.Name] = true
					}
				}
			}
		}
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && readmeImports[id.Name] != "" && !declared[id.Name] {
				used[id.Name] = true
			}
		}
		return true
	})
	// readmeFree names these.
	used["grpc"], used["net"], used["rnet"] = true, true, true
	var names []string
	for name := range declared {
		names = append(names, name)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("package readme\n\nimport (\n")
	var imports []string
	for name := range used {
		imports = append(imports, name)
	}
	sort.Strings(imports)
	for _, name := range imports {
		fmt.Fprintf(&b, "\t%s %q\n", name, readmeImports[name])
	}
	b.WriteString(")\n\n" + readmeFree + "\nfunc snippet() {\n" + text)
	for _, name := range names {
		fmt.Fprintf(&b, "\t_ = %s\n", name)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}
