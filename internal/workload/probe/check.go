package probe

import (
	"fmt"
	"slices"
	"strings"
)

// Expectation is what the pod asked for; nil fields are not checked.
type Expectation struct {
	// Count is the exact number of devices the container must see (--expect).
	Count *int
	// IDs is the exact set of device identities the container must see (--expect-ids).
	IDs []string
}

// Check records e in r and sets OK and Message. It returns r.OK for convenience.
func Check(r *Report, e Expectation) bool {
	r.Expect = e.Count
	if e.IDs != nil {
		r.ExpectIDs = dedupSorted(e.IDs)
	}
	seen := fmt.Sprintf("container sees %d: %s", len(r.Devices), formatList(r.Devices))

	var failures []string
	if e.Count != nil && *e.Count != len(r.Devices) {
		failures = append(failures, fmt.Sprintf("expected %d %s, %s", *e.Count, plural(*e.Count), seen))
	}
	if r.ExpectIDs != nil {
		missing, unexpected := diff(r.ExpectIDs, r.Devices)
		if len(missing) > 0 || len(unexpected) > 0 {
			failures = append(failures, fmt.Sprintf("device set differs from expected %s: missing %s, unexpected %s; %s",
				formatList(r.ExpectIDs), formatList(missing), formatList(unexpected), seen))
		}
	}

	r.OK = len(failures) == 0
	if r.OK {
		r.Message = fmt.Sprintf("%d %s visible: %s", len(r.Devices), plural(len(r.Devices)), formatList(r.Devices))
		if e.Count != nil || e.IDs != nil {
			r.Message += " (as expected)"
		}
	} else {
		r.Message = strings.Join(failures, "; ")
	}
	return r.OK
}

// diff returns the members of want absent from got, and of got absent from want, both sorted.
func diff(want, got []string) (missing, unexpected []string) {
	inGot := map[string]bool{}
	for _, g := range got {
		inGot[g] = true
	}
	inWant := map[string]bool{}
	for _, w := range want {
		inWant[w] = true
		if !inGot[w] {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !inWant[g] {
			unexpected = append(unexpected, g)
		}
	}
	slices.Sort(missing)
	slices.Sort(unexpected)
	return missing, unexpected
}

// dedupSorted returns the distinct non-empty entries, sorted; never nil.
func dedupSorted(ids []string) []string {
	set := map[string]bool{}
	out := []string{}
	for _, id := range ids {
		if id != "" && !set[id] {
			set[id] = true
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// formatList renders ids as "[a b]" like fmt does for slices, but an empty list stays "[]" rather than
// depending on whether the slice is nil.
func formatList(ids []string) string {
	return "[" + strings.Join(ids, " ") + "]"
}

func plural(n int) string {
	if n == 1 {
		return "device"
	}
	return "devices"
}
