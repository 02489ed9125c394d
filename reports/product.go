package reports

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"gpuconform.io/gpuconform/framework/conformance"
)

// ProductFile is the program's submission file (cncf/k8s-ai-conformance vX.Y/<product>/PRODUCT.yaml).
// gpuconform writes it at the top of the run's artifacts, so that its evidence links (the JUnit report
// and the evidence pages) resolve from where it lies: the directory is the submission as it stands.
const ProductFile = "PRODUCT.yaml"

// JUnitFile is the run's JUnit report, the machine-readable test report the program recommends as
// evidence from v1.37.
const JUnitFile = "junit.gpuconform.xml"

// StatusNA is the checklist's status of a requirement that does not apply to the platform; its notes
// must say why.
const StatusNA = "N/A"

// ProductYAML is the program's checklist file of the run's version, filled in: the checklist's own
// ids, descriptions and levels, verbatim and in its order (read from the embedded file, never written
// here); per requirement the status gpuconform's specs earned, their JUnit test cases and evidence page
// as evidence, and notes; the metadata the participant gave, each missing field blank with a TODO.
func ProductYAML(ev Evidence, rec Record) ([]byte, error) {
	raw, err := conformance.File(ev.Version)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("checklist %s: %w", ev.Version, err)
	}
	root := doc.Content[0]
	meta, spec := mappingValue(root, "metadata"), mappingValue(root, "spec")
	if meta == nil || spec == nil {
		return nil, fmt.Errorf("checklist %s has no metadata or spec section", ev.Version)
	}
	fillMetadata(meta, ev.Version, rec.Signoff.Conformance.Product)
	byID := map[string]RequirementEvidence{}
	for _, r := range ev.Requirements {
		byID[string(r.ID)] = r
	}
	for i := 1; i < len(spec.Content); i += 2 {
		for _, item := range spec.Content[i].Content {
			id := mappingValue(item, "id")
			if id == nil {
				continue
			}
			if r, ok := byID[id.Value]; ok {
				fillRequirement(item, r)
			}
		}
	}
	head := fmt.Sprintf("Filled in by gpuconform from run %s against %s (Kubernetes %s). Status is set where a gpuconform\n"+
		"spec proved the requirement, saw it fail, or found it not applicable; the rest is left to the participant.\n"+
		"Check it with: gpuconform report --check-product %s", rec.RunID, rec.Context, rec.KubernetesVersion, ProductFile)
	doc.HeadComment = strings.TrimSpace(head + "\n\n" + doc.HeadComment)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// mappingValue is the value node of key in a mapping node (nil when absent).
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func quoted(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v, Style: yaml.DoubleQuotedStyle}
}

// setMapping sets key in m, appending it when the template lacks it (k8sConformanceUrl, which the
// program's validator requires, is not in every checklist's template).
func setMapping(m *yaml.Node, key string, value *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = value
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, value)
}

// fillMetadata writes the participant's metadata; a field they did not give is blank (never the
// template's "[placeholder]", which the program rejects as such) with a TODO naming what it wants.
func fillMetadata(meta *yaml.Node, version string, p conformance.Metadata) {
	setMapping(meta, "kubernetesVersion", &yaml.Node{Kind: yaml.ScalarNode, Value: "v" + version})
	for _, f := range conformance.MetadataFields() {
		v := quoted(p.Get(f.Key))
		if v.Value == "" {
			v.LineComment = "TODO: " + f.What
			if !f.Required {
				v.LineComment = "optional: " + f.What
			}
		}
		setMapping(meta, f.Key, v)
	}
}

// fillRequirement writes a requirement's status, evidence and notes; id, description and level stay as
// the program wrote them.
func fillRequirement(item *yaml.Node, r RequirementEvidence) {
	setMapping(item, "status", quoted(r.Status))
	ev := &yaml.Node{Kind: yaml.SequenceNode}
	for _, link := range r.Links() {
		ev.Content = append(ev.Content, quoted(link))
	}
	if len(ev.Content) == 0 {
		ev.Style = yaml.FlowStyle
	}
	setMapping(item, "evidence", ev)
	setMapping(item, "notes", quoted(r.Notes))
}

// Links are a requirement's evidence links, relative to PRODUCT.yaml: its page, then each spec's test
// case in the JUnit report (file#test case name, the form the program's v1.37 instructions show).
func (r RequirementEvidence) Links() []string {
	if len(r.Specs) == 0 {
		return nil
	}
	out := []string{EvidenceDir + "/" + r.Page}
	for _, sp := range r.Specs {
		out = append(out, JUnitFile+"#"+sp.JUnitName)
	}
	return out
}
