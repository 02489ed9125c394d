package suite

import "gpuconform.io/gpuconform/framework/config"

// Needs is what a scenario needs from the run to exercise its specs. A scenario that is required by
// default is required only where the run meets its Needs' gating part (Kueue, PriorityQueues, Disruptive,
// CanaryPool); FaultProvider and CheckpointStorage decide single specs, which the scenario reports as not
// exercised without them, so a run lacking them is INCOMPLETE rather than silently exempt.
type Needs struct {
	// Kueue: it submits through Kueue.
	Kueue bool
	// PriorityQueues: it needs queues it may preempt in: its own ClusterQueues and priority classes, or
	// the user's LocalQueue with --low-priority-class and --high-priority-class.
	PriorityQueues bool
	// Disruptive: it changes nodes (the user's opt-in).
	Disruptive bool
	// CanaryPool: it works on a canary pool beside a known-good one.
	CanaryPool bool
	// FaultProvider: it injects node or device faults.
	FaultProvider bool
	// CheckpointStorage: it resumes from checkpoints on storage that outlives a node.
	CheckpointStorage bool
}

// Or is the union of two sets of needs (what the preflight must ask permissions for).
func (n Needs) Or(o Needs) Needs {
	return Needs{Kueue: n.Kueue || o.Kueue, PriorityQueues: n.PriorityQueues || o.PriorityQueues, Disruptive: n.Disruptive || o.Disruptive,
		CanaryPool: n.CanaryPool || o.CanaryPool, FaultProvider: n.FaultProvider || o.FaultProvider, CheckpointStorage: n.CheckpointStorage || o.CheckpointStorage}
}

// Facts is what a run offers, in the terms of Needs.
type Facts Needs

// Gates reports whether the run offers n's gating part (see Needs).
func (f Facts) Gates(n Needs) bool {
	return (!n.Kueue || f.Kueue) && (!n.PriorityQueues || f.PriorityQueues) && (!n.Disruptive || f.Disruptive) && (!n.CanaryPool || f.CanaryPool)
}

// ConfigFacts is what the configuration alone says the run offers: all a run that never reached its
// cluster can know (Kueue and a canary pool are discovered, so they are not offered).
func ConfigFacts(cfg config.Config) Facts {
	return Facts{Disruptive: cfg.Disruptive}
}

// Facts is what this run offers.
func (r *Run) Facts() Facts {
	f := ConfigFacts(r.Config)
	f.Kueue = r.KueueUsable
	f.PriorityQueues = r.KueueUsable && (r.ExistingLocalQueue() == "" || r.Config.Preemption.LowPriorityClass != "")
	f.CanaryPool = len(r.Caps.Pools.Canary.Nodes) > 0
	f.CheckpointStorage = !r.Checkpoints.None()
	if r.Config.Disruptive {
		inj := r.Faults()
		f.FaultProvider = inj.Nodes != nil || inj.Devices != nil || inj.DRADevices != nil
	}
	return f
}
