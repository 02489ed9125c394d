package diagnose

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Run diagnoses the target: Collect reads, Decide classifies. It returns an
// error only when the diagnosis itself could not be made (the API server is
// unreachable, the context ended); a missing target, a denied read or an
// unserved API are verdicts (Reason NotFound, Forbidden, APIMissing) in the
// Result.
func Run(ctx context.Context, c Clients, t Target) (*Result, error) {
	s, err := Collect(ctx, c, t)
	if err != nil {
		return nil, err
	}
	return Decide(s)
}

// Explain is what a failed wait prints: the diagnosis as text, or one
// sentence saying why the diagnosis itself failed. It never errors so a
// caller can put it straight into a failure message.
func Explain(ctx context.Context, c Clients, t Target) string {
	res, err := Run(ctx, c, t)
	if err != nil {
		return fmt.Sprintf("diagnosis of %s failed: %v", t, err)
	}
	return res.String()
}

// ParseKind normalises the kinds the CLI and callers accept ("job", "jobs",
// "jobs.batch", "workload", "workloads.kueue.x-k8s.io", "pod", "po", ...) to
// "Job", "Workload" or "Pod", or to an owner kind ("Deployment", "JobSet", ...).
func ParseKind(s string) (string, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	if i := strings.Index(k, "."); i >= 0 {
		k = k[:i]
	}
	switch k {
	case "job", "jobs":
		return "Job", nil
	case "workload", "workloads", "wl":
		return "Workload", nil
	case "pod", "pods", "po":
		return "Pod", nil
	}
	if kind, ok := ownerKind(k); ok {
		return kind, nil
	}
	return "", unsupportedKind(s)
}

// normalise gives the target its canonical kind and the default namespace when it names none.
func normalise(t Target) (Target, error) {
	kind, err := ParseKind(t.Kind)
	if err != nil {
		return t, err
	}
	t.Kind = kind
	if t.Namespace == "" {
		t.Namespace = metav1.NamespaceDefault
	}
	return t, nil
}
