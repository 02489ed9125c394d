package diagnose

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// A known defect is a component's bug that leaves a workload stuck in words of the component's own: the
// message alone would read as an unknown wait (the scheduler retries it forever), so the diagnosis names
// the defect, where it is, and the way round it, and calls the wait final. Each entry quotes the text
// the component's source produces, never what one cluster happened to print.
type knownDefect struct {
	// Says is the text the defect produces, a substring of the component's message.
	Says string
	// Layer is the component the defect is in.
	Layer Layer
	// In names the component and the versions it is known in.
	In string
	// Source is where the component produces Says.
	Source string
	// What happens, and Around: what a user does instead.
	What, Around string
}

// knownDefects are the defects the diagnosis names.
var knownDefects = []knownDefect{{
	Says:   "nil or empty request mappings",
	Layer:  LayerDRA,
	In:     "kube-scheduler v1.37 (DynamicResources plugin, PreBind; seen on v1.37.2)",
	Source: "pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go, patchPodExtendedResourceClaimStatus",
	What: "a pod with a ResourceClaim of its own that also asks for an extended resource a DeviceClass maps (spec.extendedResourceName) " +
		"cannot bind to a node whose device plugin serves that resource: PreBind finds no request mappings for the extended resource's " +
		"claim and fails, and every retry fails the same way",
	Around: "ask for the pod's devices one way (its claims only, or the extended resource only), or keep such pods off the nodes " +
		"whose device plugin advertises the name",
}}

// knownDefectIn is the known defect one of msgs shows.
func knownDefectIn(msgs []string) (knownDefect, bool) {
	for _, d := range knownDefects {
		for _, m := range msgs {
			if strings.Contains(m, d.Says) {
				return d, true
			}
		}
	}
	return knownDefect{}, false
}

// knownDefectResult is the final verdict on a pod stuck on defect d.
func knownDefectResult(pod *corev1.Pod, stage Stage, msgs []string, d knownDefect) *Result {
	res := &Result{Stage: stage, Layer: d.Layer, Reason: KnownDefect, Messages: append(msgs,
		fmt.Sprintf("known defect of %s: %s (%s)", d.In, d.What, d.Source)),
		Next: fmt.Sprintf("kubectl get pod %s -n %s -o yaml; kubectl get deviceclasses -o custom-columns=NAME:.metadata.name,EXTENDED:.spec.extendedResourceName", pod.Name, pod.Namespace)}
	return res.terminal("a known defect of " + d.In + ": every retry fails alike; " + d.Around)
}
