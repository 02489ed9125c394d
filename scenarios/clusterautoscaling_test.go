package scenarios

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	k8slabels "k8s.io/apimachinery/pkg/labels"
)

func TestPoolAffinity(t *testing.T) {
	cases := []struct {
		selector  string
		hostnames []string
		want      []corev1.NodeSelectorRequirement
	}{
		{"karpenter.sh/nodepool=gpu", nil, []corev1.NodeSelectorRequirement{
			{Key: "karpenter.sh/nodepool", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu"}}}},
		{"pool in (a,b),!spot,zone!=z", []string{"n2", "n1"}, []corev1.NodeSelectorRequirement{
			{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}},
			{Key: "spot", Operator: corev1.NodeSelectorOpDoesNotExist},
			{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"z"}},
			{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1", "n2"}}}},
		{"gpu,size>3", nil, []corev1.NodeSelectorRequirement{
			{Key: "gpu", Operator: corev1.NodeSelectorOpExists},
			{Key: "size", Operator: corev1.NodeSelectorOpGt, Values: []string{"3"}}}},
	}
	for _, c := range cases {
		sel, err := k8slabels.Parse(c.selector)
		if err != nil {
			t.Fatal(err)
		}
		a := poolAffinity(sel, c.hostnames)
		terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 {
			t.Fatalf("%s: %d terms, want one (its requirements ANDed)", c.selector, len(terms))
		}
		got := terms[0].MatchExpressions
		for i := range got {
			if len(got[i].Values) == 0 {
				got[i].Values = nil
			}
		}
		if !equality.Semantic.DeepEqual(got, c.want) {
			t.Errorf("%s %v:\n got %+v\nwant %+v", c.selector, c.hostnames, got, c.want)
		}
	}
}

func TestRefusedOnly(t *testing.T) {
	ev := func(reason, msg string) corev1.Event { return corev1.Event{Reason: reason, Message: msg} }
	scheduler := ev("FailedScheduling", "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.")
	cases := []struct {
		name string
		evs  []corev1.Event
		want bool
	}{
		{"no events yet", nil, false},
		{"the scheduler alone", []corev1.Event{scheduler}, false},
		{"cluster-autoscaler refuses", []corev1.Event{scheduler, ev("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 node(s) had untolerated taint {nvidia.com/gpu: present}")}, true},
		{"cluster-autoscaler scales up", []corev1.Event{scheduler, ev("TriggeredScaleUp", "pod triggered scale-up: [{gpu 0->1 (max: 3)}]")}, false},
		{"cluster-autoscaler refused, then scaled up", []corev1.Event{ev("NotTriggerScaleUp", "pod didn't trigger scale-up: in backoff"), ev("TriggeredScaleUp", "pod triggered scale-up")}, false},
		{"Karpenter refuses", []corev1.Event{scheduler, ev("FailedScheduling", `Failed to schedule pod, incompatible with nodepool "gpu", did not tolerate taint`)}, true},
		{"Karpenter nominates", []corev1.Event{scheduler, ev("Nominated", "Pod should schedule on: nodeclaim/gpu-x")}, false},
	}
	for _, c := range cases {
		if got := refusedOnly(c.evs); got != c.want {
			t.Errorf("%s: refusedOnly = %t, want %t", c.name, got, c.want)
		}
	}
}

func TestScaleDownBlocked(t *testing.T) {
	for _, c := range []struct {
		annotations map[string]string
		blocked     bool
	}{
		{nil, false},
		{map[string]string{"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}, true},
		{map[string]string{"cluster-autoscaler.kubernetes.io/scale-down-disabled": "false"}, false},
		{map[string]string{"karpenter.sh/do-not-disrupt": "true"}, true},
	} {
		if got := scaleDownBlocked(c.annotations) != ""; got != c.blocked {
			t.Errorf("%v: blocked %t, want %t", c.annotations, got, c.blocked)
		}
	}
}
