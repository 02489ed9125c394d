package scenarios

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2"

	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/labels"
)

func TestTakesDerivesLocks(t *testing.T) {
	cases := []struct {
		takes    Takes
		labels   []string
		priority *ginkgo.SpecPriority
	}{
		{Takes{}, nil, nil},
		{Takes{Devices: EachNode}, nil, &poolReadersFirst},
		{Takes{Devices: NoDevice}, []string{labels.NoDevices}, &noDevicesFirst},
		{Takes{Devices: FewOnOneNode}, []string{labels.OnNode}, nil},
		{Takes{Devices: OneWholeNode}, []string{labels.HoldsNode}, nil},
		{Takes{Devices: WholeNodes}, []string{labels.LeasesNodes}, nil},
		{Takes{Devices: WholePath}, []string{labels.HoldsPath}, &pathHoldersLast},
		{Takes{Devices: WholePool}, []string{labels.HoldsNodes}, nil},
		{Takes{Devices: CanaryPool}, []string{labels.HoldsCanary, labels.Disruptive}, nil},
		{Takes{StopsNode: true}, []string{labels.StopsNode, labels.Disruptive}, &chainFirst},
		{Takes{Devices: WholePath, StopsNode: true}, []string{labels.HoldsPath, labels.StopsNode, labels.Disruptive}, &chainFirst},
		{Takes{Devices: OneWholeNode, FailsDevice: true}, []string{labels.HoldsNode, labels.FaultsDevice, labels.Disruptive}, nil},
		{Takes{Devices: WholeNodes, FailsDevice: true}, []string{labels.LeasesNodes, labels.FaultsDevice, labels.Disruptive}, nil},
	}
	dra := &gpu.DRA{Devices: map[string][]string{"w1": {"gpu-0"}}}
	b := Base{Paths: []gpu.Path{dra}, GPUPool: []string{"w1"}}
	for _, c := range cases {
		ls, priority := c.takes.derive()
		if !slices.Equal(ls, c.labels) {
			t.Errorf("%+v: labels %v, want %v", c.takes, ls, c.labels)
		}
		if (priority == nil) != (c.priority == nil) || (priority != nil && *priority != *c.priority) {
			t.Errorf("%+v: priority %v, want %v", c.takes, priority, c.priority)
		}
		// What the kit derives is what poolHold plans from: every label it gives is one poolHold reads.
		plan := poolHold(ls, "dra", b)
		if len(plan.locks) == 0 && c.takes.Devices != CanaryPool {
			t.Errorf("%+v: poolHold plans no lock from %v", c.takes, ls)
		}
	}
	if d := takes(Takes{AddsNodes: true}); !slices.Contains(d, any(ginkgo.Serial)) {
		t.Errorf("a spec that adds nodes is not Serial: %v", d)
	}
}

func TestTakesRefusesWhatNoPlanServes(t *testing.T) {
	for _, bad := range []Takes{
		{Devices: OneWholeNode, StopsNode: true}, // it stops a node it does not hold alone
		{Devices: NoDevice, StopsNode: true},
		{Devices: AnyNodes, FailsDevice: true}, // a device fault needs the node held
		{Devices: WholePath, FailsDevice: true},
		{Devices: Devices(99)},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v was accepted", bad)
				}
			}()
			takes(bad)
		}()
	}
}

// TestScenarioCodeNamesNoLock holds the kit's rule: outside the kit (kit.go, skeleton.go) no scenario file
// names a pool-lock label, a lock priority or Serial; each says what it takes (Takes).
func TestScenarioCodeNamesNoLock(t *testing.T) {
	lockNames := map[string]bool{"HoldsNode": true, "HoldsNodes": true, "HoldsPath": true, "OnNode": true, "LeasesNodes": true,
		"NoDevices": true, "StopsNode": true, "FaultsDevice": true, "HoldsCanary": true, "Serial": true}
	priorities := map[string]bool{"chainFirst": true, "pathHoldersLast": true, "noDevicesFirst": true, "poolReadersFirst": true}
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("listing the scenario files: %v (%d files)", err, len(files))
	}
	checked := 0
	for _, f := range files {
		if f == "kit.go" || f == "skeleton.go" || filepath.Ext(f) != ".go" || len(f) > 8 && f[len(f)-8:] == "_test.go" {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && (x.Name == "labels" || x.Name == "ginkgo") && lockNames[n.Sel.Name] {
					t.Errorf("%s names %s.%s: say what the spec takes with takes(Takes{...})", f, x.Name, n.Sel.Name)
				}
			case *ast.Ident:
				if priorities[n.Name] {
					t.Errorf("%s names the lock priority %s: the kit derives it from Takes", f, n.Name)
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("checked %d scenario files; the rule would hold on nothing", checked)
	}
}

// TestSpecTitlesAreShort holds the titles to 80 characters, detail going to By steps and report entries:
// a literal title is measured as it is, a formatted one (fmt.Sprintf) by its format with each verb counted
// as 12 characters (a mode, a count, a version).
func TestSpecTitlesAreShort(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	titles := 0
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		consts := map[string]string{}
		ast.Inspect(file, func(n ast.Node) bool {
			if v, ok := n.(*ast.ValueSpec); ok {
				for i, name := range v.Names {
					if i < len(v.Values) {
						if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			return true
		})
		ast.Inspect(file, func(n ast.Node) bool {
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				// A deviceCheck's title: titled("…"), or a function returning fmt.Sprintf("…", …).
				if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "title" {
					title, verbs := checkTitle(kv.Value, consts)
					if title == "" {
						t.Errorf("%s: a title the test cannot read (%T)", f, kv.Value)
					}
					titles++
					if n := len([]rune(title)) + 10*verbs; n > 80 {
						t.Errorf("%s: the title %q is about %d characters; keep it to 80 and put the detail in a By step", f, title, n)
					}
				}
				return true
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "It" {
				return true
			}
			title, verbs := titleOf(call.Args[0], consts)
			if title == "" {
				return true
			}
			titles++
			if n := len([]rune(title)) + 10*verbs; n > 80 {
				t.Errorf("%s: the title %q is about %d characters; keep it to 80 and put the detail in a By step", f, title, n)
			}
			return true
		})
	}
	if titles < 40 {
		t.Fatalf("measured %d titles; the rule would hold on nothing", titles)
	}
}

// checkTitle is a deviceCheck's title as written and its verbs.
func checkTitle(e ast.Expr, consts map[string]string) (string, int) {
	var title string
	var verbs int
	ast.Inspect(e, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && title == "" && len(call.Args) > 0 {
			if t, v := titleOf(call, consts); t != "" {
				title, verbs = t, v
			} else if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "titled" {
				title, verbs = titleOf(call.Args[0], consts)
			}
		}
		return title == ""
	})
	return title, verbs
}

// titleOf is a title's text as written (a literal, a constant, or a Sprintf format) and its verbs.
func titleOf(e ast.Expr, consts map[string]string) (string, int) {
	switch e := e.(type) {
	case *ast.BasicLit:
		s, _ := strconv.Unquote(e.Value)
		return s, 0
	case *ast.Ident:
		return consts[e.Name], 0
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(e.Args) > 0 {
			format, _ := titleOf(e.Args[0], consts)
			verbs := strings.Count(format, "%") - 2*strings.Count(format, "%%")
			return format, verbs
		}
	}
	return "", 0
}

// TestScenariosUseOnlyTheKitAndTheChecks holds the package's layers: the kit (kit.go, skeleton.go,
// registry.go, outcomes.go), the application checks (check_*.go), and the scenarios, each in <name>.go and
// <name>_*.go. A scenario's file uses the kit, the checks and its own scenario's files; a check or kit file
// uses no scenario's (registry.go, which lists them, aside). A reference is an identifier the parser left
// unresolved in its file that another file declares at package level.
func TestScenariosUseOnlyTheKitAndTheChecks(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
	layer := func(f string) string {
		switch {
		case f == "kit.go" || f == "skeleton.go" || f == "registry.go" || f == "outcomes.go" || f == "doc.go":
			return "kit"
		case strings.HasPrefix(f, "check_"):
			return "checks"
		}
		scenario, _, _ := strings.Cut(strings.TrimSuffix(f, ".go"), "_")
		return "scenario " + scenario
	}
	parsed := map[string]*ast.File{}
	declaredIn := map[string]string{}
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed[f] = file
		for _, d := range file.Decls {
			for _, name := range declNames(d) {
				declaredIn[name] = f
			}
		}
	}
	refs := 0
	for f, file := range parsed {
		keys := map[*ast.Ident]bool{}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				keys[n.Sel] = true
			case *ast.KeyValueExpr:
				if id, ok := n.Key.(*ast.Ident); ok {
					keys[id] = true
				}
			case *ast.Ident:
				def, ok := declaredIn[n.Name]
				if !ok || keys[n] || n.Obj != nil || def == f {
					return true
				}
				refs++
				from, to := layer(f), layer(def)
				if f != "registry.go" && strings.HasPrefix(to, "scenario ") && from != to {
					t.Errorf("%s (%s) uses %s of %s (%s): move it to a check_*.go file, or the kit", f, from, n.Name, def, to)
				}
			}
			return true
		})
	}
	if refs < 100 {
		t.Fatalf("found %d references between the files; the rule would hold on nothing", refs)
	}
}

// declNames are the package-level names a declaration declares (a method declares none: it travels
// with its type).
func declNames(d ast.Decl) []string {
	var out []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil {
			out = append(out, d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				out = append(out, s.Name.Name)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					out = append(out, n.Name)
				}
			}
		}
	}
	return out
}
