package diagnose

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/parser"
	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

// A DeviceClass selects devices with CEL expressions over each device's driver, attributes and capacity.
// A driver upgrade that renames or retypes an attribute leaves the class selecting nothing, and every
// claim of the class then fails with the scheduler's bare "cannot allocate all claims". MatchDeviceClass
// evaluates the class the way the scheduler's allocator does (k8s.io/dynamic-resource-allocation
// structured/internal/*/allocator_*.go, selectorsMatch: the library's compiler, one cel.Device per
// published device with the slice's driver, the device's attributes, capacity and
// allowMultipleAllocations), so discovery and the diagnosis can say which class selects how many of the
// published devices and, when none, why not.

// maxMissAttributes bounds how many of the example device's attributes a message quotes.
const maxMissAttributes = 10

// DeviceClassMatch is how one DeviceClass's selectors fare against the published devices.
type DeviceClassMatch struct {
	// Class is the DeviceClass's name.
	Class string
	// Drivers are the drivers the class names in its selectors (`device.driver == "…"`, `device.driver in
	// […]`); the candidates are their devices. Empty when it names none: every published device is one.
	Drivers []string
	// Published counts the candidate devices per node ("" for slices that are not node-local).
	Published map[string]int
	// Matched lists per node, sorted, the names of the candidates every selector of the class accepts.
	Matched map[string][]string
	// CompileError is the first selector that does not compile, with the compiler's words ("" when all
	// do). Such a class selects nothing: the allocator fails every claim of it.
	CompileError string
	// Miss is the first candidate (in node, then device order) the class does not select, and why; nil
	// when it selects every candidate.
	Miss *DeviceMiss
}

// DeviceMiss is one device a class does not select, and the selector that turned it away.
type DeviceMiss struct {
	Node, Driver, Device string
	// Expression is the first selector that is false for the device or failed on it.
	Expression string
	// Err is the CEL runtime error ("no such key: …" for an attribute the device lacks); "" when the
	// expression was simply false.
	Err string
	// Attributes are the device's attributes as name=value, sorted, at most maxMissAttributes of them.
	Attributes []string
}

// Counts returns how many candidates the class selects and how many were published.
func (m DeviceClassMatch) Counts() (matched, published int) {
	for _, d := range m.Matched {
		matched += len(d)
	}
	for _, n := range m.Published {
		published += n
	}
	return matched, published
}

// Summary is the record's line: "DeviceClass X matches N of M published devices".
func (m DeviceClassMatch) Summary() string {
	matched, published := m.Counts()
	return fmt.Sprintf("DeviceClass %s matches %d of %d published devices", m.Class, matched, published)
}

// SelectsNothing says why the class can never be allocated from what is published, or "": a selector
// that does not compile, or candidates of which it selects none. A class with no candidate at all is not
// this case (its driver publishes nothing yet, a matter of the driver, not of the class).
func (m DeviceClassMatch) SelectsNothing() string {
	matched, published := m.Counts()
	switch {
	case m.CompileError != "":
		return fmt.Sprintf("DeviceClass %s selects 0 of %d published devices: %s", m.Class, published, m.CompileError)
	case published == 0 || matched > 0 || m.Miss == nil:
		return ""
	}
	return fmt.Sprintf("DeviceClass %s selects 0 of %d published devices: %s", m.Class, published, m.Miss)
}

// String says why the device was not selected, quoting the expression and the device's attributes.
func (d DeviceMiss) String() string {
	where := d.Device
	if d.Node != "" {
		where += " on node " + d.Node
	}
	// Quoted as written (not %q): selectors are full of quotes that escaping would double.
	verdict := fmt.Sprintf(`expression "%s" is false for %s`, d.Expression, where)
	if d.Err != "" {
		verdict = fmt.Sprintf(`expression "%s" fails for %s: %s`, d.Expression, where, d.Err)
	}
	return fmt.Sprintf("%s (driver %s; attributes: %s)", verdict, d.Driver, strings.Join(d.Attributes, ", "))
}

// MatchDeviceClass evaluates class's CEL selectors on every device of the candidate slices (those of the
// drivers the class names, else all), as the scheduler's allocator does. Of a pool published in several
// generations only the newest counts, as in the allocator. ctx bounds the evaluations (each is also
// bounded by the API's CEL cost limit).
func MatchDeviceClass(ctx context.Context, class *resourcev1.DeviceClass, published []resourcev1.ResourceSlice) DeviceClassMatch {
	m := DeviceClassMatch{Class: class.Name, Drivers: ClassDrivers(class), Published: map[string]int{}, Matched: map[string][]string{}}
	// The scheduler compiles with its feature gates; consumable capacity only adds the
	// allowMultipleAllocations field, so allowing it accepts every expression the API server accepted.
	compiler := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true})
	var programs []dracel.CompilationResult
	for _, sel := range class.Spec.Selectors {
		if sel.CEL == nil {
			continue // no other kind of selector exists yet; the API server requires CEL
		}
		res := compiler.CompileCELExpression(sel.CEL.Expression, dracel.Options{DisableCostEstimation: true})
		if res.Error != nil {
			// The compiler's first line names the problem; the rest draws a caret under the source.
			detail, _, _ := strings.Cut(res.Error.Detail, "\n")
			m.CompileError = fmt.Sprintf(`selector expression "%s" does not compile: %s`, sel.CEL.Expression, detail)
			for _, s := range candidates(published, m.Drivers) {
				m.Published[nodeOf(s)] += len(s.Spec.Devices)
			}
			return m
		}
		programs = append(programs, res)
	}
	for _, s := range candidates(published, m.Drivers) {
		node := nodeOf(s)
		for _, d := range s.Spec.Devices {
			m.Published[node]++
			miss := firstMiss(ctx, programs, s.Spec.Driver, d)
			if miss == nil {
				m.Matched[node] = append(m.Matched[node], d.Name)
				continue
			}
			if m.Miss == nil {
				miss.Node, miss.Driver, miss.Device = node, s.Spec.Driver, d.Name
				miss.Attributes = formatAttributes(d.Attributes)
				m.Miss = miss
			}
		}
	}
	for n := range m.Matched {
		slices.Sort(m.Matched[n])
	}
	return m
}

// firstMiss evaluates the selectors in order on one device, as the allocator's selectorsMatch does, and
// returns the first that is false or fails (nil when all accept it).
func firstMiss(ctx context.Context, programs []dracel.CompilationResult, driver string, d resourcev1.Device) *DeviceMiss {
	input := dracel.Device{Driver: driver, AllowMultipleAllocations: d.AllowMultipleAllocations, Attributes: d.Attributes, Capacity: d.Capacity}
	for _, p := range programs {
		ok, _, err := p.DeviceMatches(ctx, input)
		switch {
		case err != nil:
			return &DeviceMiss{Expression: p.Expression, Err: err.Error()}
		case !ok:
			return &DeviceMiss{Expression: p.Expression}
		}
	}
	return nil
}

// candidates are the slices a class's devices may come from, node then pool then name order: those of
// drivers (all when drivers is empty), and of each pool only its newest generation.
func candidates(published []resourcev1.ResourceSlice, drivers []string) []resourcev1.ResourceSlice {
	type pool struct{ driver, name string }
	newest := map[pool]int64{}
	for _, s := range published {
		p := pool{s.Spec.Driver, s.Spec.Pool.Name}
		newest[p] = max(newest[p], s.Spec.Pool.Generation)
	}
	var out []resourcev1.ResourceSlice
	for _, s := range published {
		if (len(drivers) == 0 || slices.Contains(drivers, s.Spec.Driver)) && s.Spec.Pool.Generation == newest[pool{s.Spec.Driver, s.Spec.Pool.Name}] {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b resourcev1.ResourceSlice) int {
		return cmp.Or(strings.Compare(nodeOf(a), nodeOf(b)), strings.Compare(a.Spec.Pool.Name, b.Spec.Pool.Name), strings.Compare(a.Name, b.Name))
	})
	return out
}

// nodeOf is the node of a node-local slice, "" for a slice that serves several nodes.
func nodeOf(s resourcev1.ResourceSlice) string {
	if s.Spec.NodeName != nil {
		return *s.Spec.NodeName
	}
	return ""
}

// formatAttributes renders attributes as name=value, sorted by name, at most maxMissAttributes of them.
func formatAttributes(attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) []string {
	names := slices.Sorted(maps.Keys(attrs))
	out := make([]string, 0, min(len(names), maxMissAttributes+1))
	for i, name := range names {
		if i == maxMissAttributes {
			out = append(out, fmt.Sprintf("and %d more", len(names)-i))
			break
		}
		out = append(out, string(name)+"="+AttributeValue(attrs[name]))
	}
	return out
}

// AttributeValue renders one attribute's value; the API allows exactly one of them to be set ("?" when
// none is).
func AttributeValue(a resourcev1.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue)
	}
	return "?"
}

// ClassDrivers returns the drivers a DeviceClass's selectors compare device.driver with (`device.driver
// == "x"`, `"x" == device.driver`, `device.driver in ["x", "y"]`), sorted, read from the expressions'
// syntax trees as CEL parses them. Empty when the class selects by other means.
func ClassDrivers(class *resourcev1.DeviceClass) []string {
	// The macros (has, all, exists, …) expand as CEL's own environments expand them.
	p, err := parser.NewParser(parser.Macros(parser.AllMacros...))
	if err != nil {
		return nil // fixed options: cannot fail
	}
	var out []string
	for _, sel := range class.Spec.Selectors {
		if sel.CEL == nil {
			continue
		}
		tree, errs := p.Parse(common.NewTextSource(sel.CEL.Expression))
		if tree == nil || len(errs.GetErrors()) > 0 {
			continue
		}
		celast.PreOrderVisit(tree.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
			if e.Kind() != celast.CallKind {
				return
			}
			call := e.AsCall()
			args := call.Args()
			if len(args) != 2 {
				return
			}
			switch call.FunctionName() {
			case operators.Equals:
				for i, other := range []celast.Expr{args[1], args[0]} {
					if isDeviceDriver(args[i]) {
						out = appendLiteral(out, other)
					}
				}
			case operators.In:
				if isDeviceDriver(args[0]) && args[1].Kind() == celast.ListKind {
					for _, el := range args[1].AsList().Elements() {
						out = appendLiteral(out, el)
					}
				}
			}
		}))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// isDeviceDriver reports the expression device.driver.
func isDeviceDriver(e celast.Expr) bool {
	if e.Kind() != celast.SelectKind {
		return false
	}
	sel := e.AsSelect()
	return sel.FieldName() == "driver" && sel.Operand().Kind() == celast.IdentKind && sel.Operand().AsIdent() == "device"
}

// appendLiteral appends e when it is a string literal.
func appendLiteral(out []string, e celast.Expr) []string {
	if e.Kind() != celast.LiteralKind {
		return out
	}
	if s, ok := e.AsLiteral().Value().(string); ok && s != "" {
		out = append(out, s)
	}
	return out
}
