package reports

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2/reporters"
	"go.yaml.in/yaml/v3"

	"gpuconform.io/gpuconform/framework/conformance"
)

// Product is a PRODUCT.yaml as the program reads it: metadata, and per section the requirements.
type Product struct {
	Metadata map[string]any           `yaml:"metadata"`
	Spec     map[string][]ProductItem `yaml:"spec"`
}

// ProductItem is one requirement of a PRODUCT.yaml.
type ProductItem struct {
	ID          string   `yaml:"id"`
	Description string   `yaml:"description"`
	Level       string   `yaml:"level"`
	Status      string   `yaml:"status"`
	Evidence    []string `yaml:"evidence"`
	Notes       string   `yaml:"notes"`
}

// ReadProduct parses a PRODUCT.yaml.
func ReadProduct(raw []byte) (Product, error) {
	var p Product
	if err := yaml.Unmarshal(raw, &p); err != nil {
		return p, err
	}
	if p.Metadata == nil || p.Spec == nil {
		return p, errors.New("no metadata or spec section")
	}
	return p, nil
}

// ProductCheck is what CheckProduct found: Problems make the file unfit to submit; Notes are what it
// could not check offline or what a reviewer will weigh.
type ProductCheck struct {
	Version  string
	Problems []string
	Notes    []string
	// junit holds each JUnit report an anchored link named, read once.
	junit map[string]junitRead
}

type junitRead struct {
	cases []reporters.JUnitTestCase
	err   error
}

// The program's rules (cncf/k8s-ai-conformance instructions.md and scripts/validate.go).
var (
	validStatuses     = []string{StatusImplemented, StatusNotImplemented, StatusPartlyImplemented, StatusNA}
	k8sConformanceURL = regexp.MustCompile(`^https://github\.com/cncf/k8s-conformance/tree/(master|main)/v\d+\.\d+/[^/]+/?$`)
	pathVersion       = regexp.MustCompile(`(?:^|/)v(\d+\.\d+)/`)
	snakeCase         = regexp.MustCompile(`([a-z0-9])([A-Z])`)
)

// CheckProduct checks a PRODUCT.yaml against the program's published rules: the metadata the program
// requires, filled and not a placeholder; every requirement of the checklist of its kubernetesVersion
// present with id, description and level verbatim; statuses from the allowed four; every MUST
// Implemented, or N/A with notes; evidence on every filled MUST; every evidence link resolvable from the
// file's directory, a JUnit anchor naming a test case of that report (passed, for an Implemented
// requirement); and, where the directory holds gpuconform's JUnit report, every test case that carries a
// requirement's label and ran linked from that requirement. URLs are checked for form only: the check
// runs offline.
func CheckProduct(file string) (ProductCheck, error) {
	var c ProductCheck
	raw, err := os.ReadFile(file)
	if err != nil {
		return c, err
	}
	p, err := ReadProduct(raw)
	if err != nil {
		return c, fmt.Errorf("%s is not a PRODUCT.yaml: %w", file, err)
	}
	kv, _ := p.Metadata["kubernetesVersion"].(string)
	c.Version = strings.TrimPrefix(kv, "v")
	list, err := conformance.For(c.Version)
	if err != nil {
		return c, fmt.Errorf("%s: metadata.kubernetesVersion %q: %w", file, kv, err)
	}
	if m := pathVersion.FindStringSubmatch(filepath.ToSlash(file)); m != nil && m[1] != c.Version {
		c.Problems = append(c.Problems, fmt.Sprintf("the file lies under v%s/ but its kubernetesVersion is %s", m[1], kv))
	}
	if list.Draft {
		c.Notes = append(c.Notes, "checklist v"+c.Version+" is gpuconform's draft, not a published checklist: the program cannot accept it yet")
	}
	c.checkMetadata(p.Metadata)
	dir := filepath.Dir(file)
	cases, junitErr := c.readJUnit(filepath.Join(dir, JUnitFile))
	for _, r := range list.Requirements {
		items := p.Spec[r.Section]
		i := slices.IndexFunc(items, func(it ProductItem) bool { return it.ID == string(r.ID) })
		if i < 0 {
			c.Problems = append(c.Problems, fmt.Sprintf("missing requirement %s in section %s", r.ID, r.Section))
			continue
		}
		c.checkItem(r, items[i], dir)
		if junitErr == nil {
			c.checkCoverage(r, items[i], cases)
		}
	}
	for section, items := range p.Spec {
		for _, it := range items {
			if r, ok := list.Find(conformance.ID(it.ID)); !ok || r.Section != section {
				c.Problems = append(c.Problems, fmt.Sprintf("%s in section %s is not a requirement of checklist v%s there", it.ID, section, c.Version))
			}
		}
	}
	if junitErr != nil && !os.IsNotExist(junitErr) {
		c.Problems = append(c.Problems, junitErr.Error())
	}
	c.Notes = append(c.Notes, "URLs were checked for their form only (offline); the program's validator also fetches each one and checks vendorName against the CNCF Landscape's members")
	return c, nil
}

func (c *ProductCheck) checkMetadata(meta map[string]any) {
	for _, f := range conformance.MetadataFields() {
		v, ok := meta[f.Key]
		if !ok {
			v, ok = meta[strings.ToLower(snakeCase.ReplaceAllString(f.Key, "${1}_${2}"))]
		}
		s, isString := v.(string)
		switch {
		case (!ok || v == nil || s == "") && f.Required:
			c.Problems = append(c.Problems, fmt.Sprintf("metadata %s is empty: %s", f.Key, f.What))
		case ok && v != nil && !isString:
			c.Problems = append(c.Problems, fmt.Sprintf("metadata %s is not a string", f.Key))
		case strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
			c.Problems = append(c.Problems, fmt.Sprintf("metadata %s is the template's placeholder %s", f.Key, s))
		case s == "":
		case f.Key == "k8sConformanceUrl" && !k8sConformanceURL.MatchString(s):
			c.Problems = append(c.Problems, fmt.Sprintf("metadata k8sConformanceUrl %s is not https://github.com/cncf/k8s-conformance/tree/master/vX.Y/NAME", s))
		case strings.HasSuffix(f.Key, "Url") && !webURL(s):
			c.Problems = append(c.Problems, fmt.Sprintf("metadata %s %q is not an http(s) URL", f.Key, s))
		case f.Key == "productLogoUrl" && !slices.ContainsFunc([]string{".svg", ".eps", ".ai"}, func(x string) bool { return strings.HasSuffix(strings.ToLower(s), x) }):
			c.Problems = append(c.Problems, fmt.Sprintf("metadata productLogoUrl %s is not an SVG, EPS or AI file", s))
		}
	}
}

func webURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func (c *ProductCheck) checkItem(r conformance.Requirement, it ProductItem, dir string) {
	bad := func(format string, args ...any) {
		c.Problems = append(c.Problems, string(r.ID)+": "+fmt.Sprintf(format, args...))
	}
	if it.Description != r.Description {
		bad("the description differs from the checklist's (the program requires it verbatim)")
	}
	if it.Level != string(r.Level) {
		bad("level %q, the checklist says %s", it.Level, r.Level)
	}
	if r.Level == conformance.Should && it.Status == "" && len(it.Evidence) == 0 {
		return // a SHOULD may be left unanswered
	}
	switch {
	case it.Status == "":
		bad("no status: the participant must answer it (%s)", strings.Join(validStatuses, ", "))
	case !slices.Contains(validStatuses, it.Status):
		bad("status %q is not one of %s", it.Status, strings.Join(validStatuses, ", "))
	case r.Level == conformance.Must && it.Status == StatusNA:
		c.Notes = append(c.Notes, string(r.ID)+": a MUST marked N/A: the program's validator wants Implemented, so a reviewer must accept the notes' reason")
	case r.Level == conformance.Must && it.Status != StatusImplemented:
		bad("a MUST must be Implemented (or N/A with notes), not %q", it.Status)
	}
	if it.Status == StatusNA && strings.TrimSpace(it.Notes) == "" {
		bad("N/A needs notes that say why")
	}
	if r.Level == conformance.Must && it.Status == StatusImplemented && len(it.Evidence) == 0 {
		bad("an Implemented MUST needs evidence")
	}
	for _, link := range it.Evidence {
		if why := c.checkLink(link, dir, it.Status == StatusImplemented); why != "" {
			bad("evidence %q: %s", link, why)
		}
	}
}

// checkLink resolves one evidence link: an http(s) URL by its form, a file (relative, or file://) from
// dir, and a #anchor into a JUnit report by its test case.
func (c *ProductCheck) checkLink(link, dir string, mustPass bool) string {
	if strings.HasPrefix(link, "http://") || strings.HasPrefix(link, "https://") {
		if !webURL(link) {
			return "not a URL"
		}
		return ""
	}
	path, anchor, _ := strings.Cut(strings.TrimPrefix(link, "file://"), "#")
	full := filepath.Join(dir, filepath.FromSlash(path))
	if _, err := os.Stat(full); err != nil {
		return "not found at " + full
	}
	if anchor == "" {
		return ""
	}
	cases, err := c.readJUnit(full)
	if err != nil {
		return "has an anchor, but " + err.Error()
	}
	i := slices.IndexFunc(cases, func(tc reporters.JUnitTestCase) bool { return tc.Name == anchor })
	switch {
	case i < 0:
		return "no test case of " + path + " has that name"
	case mustPass && cases[i].Status != "passed":
		return "the test case " + cases[i].Status + ", which does not make the requirement Implemented"
	}
	return ""
}

// checkCoverage: every test case of gpuconform's JUnit report that carries the requirement's label and
// ran is one of its evidence links, so that dropping the evidence of a spec that ran is caught.
func (c *ProductCheck) checkCoverage(r conformance.Requirement, it ProductItem, cases []reporters.JUnitTestCase) {
	label := "conformance:" + string(r.ID)
	for _, tc := range cases {
		if tc.Status != "passed" && tc.Status != "failed" {
			continue
		}
		open := strings.LastIndex(tc.Name, " [")
		if open < 0 || !slices.Contains(strings.Split(strings.TrimSuffix(tc.Name[open+2:], "]"), ", "), label) {
			continue
		}
		if !slices.ContainsFunc(it.Evidence, func(l string) bool { return strings.HasSuffix(l, "#"+tc.Name) }) {
			c.Problems = append(c.Problems, fmt.Sprintf("%s: the evidence does not link the test case %q of %s, which carries its label and %s", r.ID, tc.Name, JUnitFile, tc.Status))
		}
	}
}

// readJUnit is readJUnitCases, each file read and parsed once per check.
func (c *ProductCheck) readJUnit(path string) ([]reporters.JUnitTestCase, error) {
	if r, ok := c.junit[path]; ok {
		return r.cases, r.err
	}
	cases, err := readJUnitCases(path)
	if c.junit == nil {
		c.junit = map[string]junitRead{}
	}
	c.junit[path] = junitRead{cases, err}
	return cases, err
}

// readJUnitCases reads the test cases of a JUnit report.
func readJUnitCases(path string) ([]reporters.JUnitTestCase, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s reporters.JUnitTestSuites
	if err := xml.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%s is not a JUnit report: %w", filepath.Base(path), err)
	}
	var out []reporters.JUnitTestCase
	for _, ts := range s.TestSuites {
		out = append(out, ts.TestCases...)
	}
	return out, nil
}
