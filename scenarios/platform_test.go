package scenarios

import "testing"

func TestAutoscalerHealth(t *testing.T) {
	for _, c := range []struct{ status, want string }{
		// The YAML form cluster-autoscaler writes since 1.30.
		{"time: 2026-12-06 10:00:00\nautoscalerStatus: Running\nclusterWide:\n  health:\n    status: Healthy\n    nodeCounts:\n      registered:\n        total: 3\n", "Healthy"},
		{"autoscalerStatus: Running\nclusterWide:\n  health:\n    status: Unhealthy\n", "Unhealthy"},
		// The older text form.
		{"Cluster-autoscaler status at 2023-01-01 10:00:00:\nCluster-wide:\n  Health:      Healthy (ready=3 unready=0 notStarted=0 registered=3)\n", "Healthy"},
		// A node group's health is not the cluster's.
		{"NodeGroups:\n  Name: pool-a\n  Health: Healthy\n", "unreadable"},
		{"", "unreadable"},
	} {
		if got := autoscalerHealth(c.status); got != c.want {
			t.Errorf("autoscalerHealth(%q) = %q, want %q", c.status, got, c.want)
		}
	}
}
