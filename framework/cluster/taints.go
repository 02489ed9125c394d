package cluster

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"gpuconform.io/gpuconform/framework/diagnose"
)

// Taints is what discovery found about the GPU pool's taints and what the suite does about them.
type Taints struct {
	// Dedication are the taints that reserve the pool for GPU work: NoSchedule or PreferNoSchedule taints
	// that every node of the pool carries (same key, value and effect), and taints whose key is in the
	// configured dedicationTaints list. Lifecycle taints (node.kubernetes.io/...) never count.
	Dedication []corev1.Taint `json:"dedication,omitempty"`
	// Tolerated are the dedication taints test pods tolerate automatically (all of Dedication unless
	// autoTolerateDedicationTaints is off).
	Tolerated []corev1.Taint `json:"tolerated,omitempty"`
	// Excluding names, per pool node, the taints that keep the suite's pods off it although the rest of
	// the pool does not carry them (maintenance, a broken node, a team's reservation). Such a node is
	// left out of the pool the specs use.
	Excluding map[string][]corev1.Taint `json:"excluding,omitempty"`
}

// Tolerations returns one toleration per tolerated taint: Equal with the taint's value (Exists when it
// has none) and its effect, so nothing wider than the taint is tolerated.
func (t Taints) Tolerations() []corev1.Toleration {
	out := make([]corev1.Toleration, 0, len(t.Tolerated))
	for _, taint := range t.Tolerated {
		tol := corev1.Toleration{Key: taint.Key, Effect: taint.Effect, Operator: corev1.TolerationOpExists}
		if taint.Value != "" {
			tol.Operator, tol.Value = corev1.TolerationOpEqual, taint.Value
		}
		out = append(out, tol)
	}
	return out
}

// FormatTaint renders a taint as kubectl does: key[=value]:Effect.
func FormatTaint(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
}

// FormatDeviceTaint renders a DRA device taint as FormatTaint renders a node's: key=value:Effect.
func FormatDeviceTaint(t resourcev1.DeviceTaint) string {
	return FormatTaint(corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
}

// KeepsFromAllocation reports whether a device taint effect keeps the scheduler from allocating the device
// to a claim that does not tolerate it: NoSchedule and NoExecute; None and unknown effects do not (the
// API's rule for consumers).
func KeepsFromAllocation(effect resourcev1.DeviceTaintEffect) bool {
	return effect == resourcev1.DeviceTaintEffectNoSchedule || effect == resourcev1.DeviceTaintEffectNoExecute
}

// discoverTaints decides the pool's dedication taints, which of them test pods tolerate, and which pool
// nodes remain unusable to test pods with those and the configured tolerations.
func discoverTaints(pool []string, nodes []corev1.Node, configuredKeys []string, autoTolerate bool, configured []corev1.Toleration) Taints {
	inPool := make(map[string]bool, len(pool))
	for _, name := range pool {
		inPool[name] = true
	}
	var members []corev1.Node
	for _, n := range nodes {
		if inPool[n.Name] {
			members = append(members, n)
		}
	}
	var t Taints
	if len(members) == 0 {
		return t
	}
	key := FormatTaint
	// How many pool nodes carry each taint (key, value and effect): linear in nodes × taints, so a pool
	// of thousands of nodes is decided in milliseconds.
	carriers := map[string]int{}
	for _, n := range members {
		seenOnNode := map[string]bool{}
		for _, taint := range n.Spec.Taints {
			if k := key(taint); !seenOnNode[k] {
				seenOnNode[k] = true
				carriers[k]++
			}
		}
	}
	onAll := func(taint corev1.Taint) bool { return carriers[key(taint)] == len(members) }
	seen := map[string]bool{}
	add := func(taint corev1.Taint) {
		if !seen[key(taint)] {
			seen[key(taint)] = true
			t.Dedication = append(t.Dedication, corev1.Taint{Key: taint.Key, Value: taint.Value, Effect: taint.Effect})
		}
	}
	for _, taint := range members[0].Spec.Taints {
		if diagnose.LifecycleTaint(taint) || (taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectPreferNoSchedule) {
			continue
		}
		if onAll(taint) {
			add(taint)
		}
	}
	for _, n := range members {
		for _, taint := range n.Spec.Taints {
			if slices.Contains(configuredKeys, taint.Key) && !diagnose.LifecycleTaint(taint) {
				add(taint)
			}
		}
	}
	slices.SortFunc(t.Dedication, func(a, b corev1.Taint) int { return strings.Compare(key(a), key(b)) })
	if autoTolerate {
		t.Tolerated = slices.Clone(t.Dedication)
	}

	// A node the pods still cannot use, for a taint the other pool nodes do not share, is named and
	// excluded. A taint on every node stays: the specs run into it and say so (UntoleratedTaint).
	tolerations := append(slices.Clone(configured), t.Tolerations()...)
	for _, n := range members {
		for _, taint := range diagnose.UntoleratedTaints(&n, tolerations) {
			if onAll(taint) {
				continue
			}
			if t.Excluding == nil {
				t.Excluding = map[string][]corev1.Taint{}
			}
			t.Excluding[n.Name] = append(t.Excluding[n.Name], taint)
		}
	}
	return t
}
