package suite

import "gpuconform.io/gpuconform/reports"

// SetupRecord is the record of a run that stopped before its specs: what discovery had read by then (the
// server version, Kueue, the GPU nodes, the notes), the policy and the user's filters.
func (r *Run) SetupRecord(signoff reports.Signoff, filters string) reports.Record {
	rec := reports.NewRecord(r.RunID, r.ContextName(), r.Server(), r.Caps, nil)
	rec.Signoff, rec.Notes, rec.Taints = signoff, r.RecordNotes(), r.Caps.Taints
	rec.Parameters = reports.Parameters{TimeoutProfile: r.Config.TimeoutProfile, TimeoutProfileWhy: r.ProfileWhy, Namespace: r.Config.Namespace,
		LocalQueue: r.ExistingLocalQueue(), GPUPool: r.Caps.Pools.GPU.Nodes, Filters: filters}
	rec.Monitoring = r.Monitoring.String()
	if !r.Monitoring.Present() {
		rec.Monitoring = "none: " + r.MonitoringWhy
	}
	for _, s := range r.Skipped() {
		rec.AddNotExercised(s.What, s.Why)
	}
	return rec
}

// Record is the run's compatibility record as discovery and the scenarios' registration left it.
func (r *Run) Record(signoff reports.Signoff) reports.Record {
	paths := make([]reports.PathDescriber, len(r.Paths))
	for i, p := range r.Paths {
		paths[i] = p
	}
	rec := reports.NewRecord(r.RunID, r.ContextName(), r.Server(), r.Caps, paths)
	rec.Signoff, rec.FeatureGates, rec.Notes, rec.Taints = signoff, r.FeatureGates, r.RecordNotes(), r.Caps.Taints
	rec.Parameters = reports.Parameters{TimeoutProfile: r.Config.TimeoutProfile, TimeoutProfileWhy: r.ProfileWhy, Namespace: r.Config.Namespace,
		LocalQueue: r.ExistingLocalQueue(), GPUPool: r.Caps.Pools.GPU.Nodes, Tolerations: r.Tolerations, Checkpoints: r.Checkpoints.String()}
	if r.Config.Disruptive {
		rec.Parameters.Faults = r.DescribeFaults()
	}
	rec.NodeMonitorGracePeriod = r.NodeMonitorGracePeriod
	rec.AcceleratorMetrics = r.Metrics.String()
	if !r.Metrics.Present() {
		rec.AcceleratorMetrics = "none: " + r.MetricsWhy
	}
	for _, s := range r.Skipped() {
		rec.AddNotExercised(s.What, s.Why)
	}
	return rec
}
