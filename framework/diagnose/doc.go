// Package diagnose answers "where is this workload waiting, and why?" for a
// Job, a Kueue Workload, a Pod, or an owner of pods (Deployment, StatefulSet,
// ReplicaSet, or a kind Kueue integrates, such as JobSet). The verdict is
// typed (Stage, Layer, Reason), quotes the exact texts it rests on and lists
// the objects read, so a failed wait in a suite and the `gpuconform
// diagnose` command print the same evidence. It only gets and lists.
//
// # How a diagnosis is made
//
// Collect first, then decide. Collect reads, one layer after the other, into
// a Snapshot of plain objects, recording each read that fails instead of
// stopping on it; Decide classifies the Snapshot without a client, so a
// snapshot recorded as YAML gives the verdict its cluster gave. Following a
// Job target from Run to its Result takes these stops, in order:
//
//  1. Run (run.go): Collect, then Decide.
//  2. Collect (collect.go): calls the six readers below, in order.
//  3. readTarget: the application layer's objects: the Job and its pods.
//  4. readQueue: Kueue's: the Job's Workload and, while it waits for quota,
//     what Kueue said (its events) and its LocalQueue and ClusterQueue.
//  5. readEvents: what the scheduler, the kubelet and the runtime said about
//     the pod that explains the workload (or the controllers about missing
//     pods).
//  6. readClaims: DRA's: that pod's ResourceClaims and templates.
//  7. readNodes: the scheduler's: the nodes, when its message names a gate
//     or a lack of capacity.
//  8. readDeviceClasses (dra_class.go): DRA's again: the DeviceClasses the
//     pod's claims ask for and the published ResourceSlices, when the
//     scheduler cannot allocate the claims. Back to Run (the first return).
//  9. Decide (decide.go): resolves the snapshot into a view once, then runs
//     one pass per layer in the order a workload waits (decide), the first
//     that places it deciding.
//  10. view (view.go): the workload's frame (snapshot.go: which Job, Workload
//     and pods are the target's, and the first failed read among them, a
//     Forbidden or APIMissing verdict; readers 4 to 8 call frame too, to know
//     whose objects to read), and what the passes look at beyond it: the
//     events about each object, the pod's claims (claimsOf, dra.go), its
//     DeviceClasses (deviceClassesOf, dra_class.go), the queues (queuesOf) and
//     the nodes. A read that failed becomes the verdict on it (a got), which a
//     pass returns only if it needs what the read would have given.
//  11. The passes, each a function of the view: queued (Kueue, kueue.go),
//     created (the controllers that create its pods, controllers.go), then
//     the explaining pod's scheduled (scheduler.go), admitted, containers and
//     starting (pod.go). Back to Decide with the Result (the second return),
//     which adds the workload's objects to those the pass rested on.
//
// The passes hand pieces of the view to helpers that call nothing back. A
// pod with no node goes from scheduled to the scheduler's counted causes
// (ParseSchedulerMessage, schedmsg.go), to classesSelect (dra_class.go),
// which evaluates the claims' DeviceClasses on the published devices
// (MatchDeviceClass, deviceclass.go), and to refineCapacity or refineGates
// for what the nodes add. A queued Job, which has no pods, goes from queued
// to workloadVerdict, notReserved and checkQueues (kueue.go); a Job that
// should have pods and has none (admitted, or not queued) goes from created
// to noPodsYet, which reads the Job controller's FailedCreate with
// ParseAdmissionDenial; a bound pod whose DRA driver failed goes from
// starting to addClaims (dra.go), and to unregistered (dra.go) when the
// kubelet says the driver is not registered; a container whose pull or
// create failed goes from containers to repeats (repeats.go), which counts
// the kubelet's identical failures (repeated, which unregistered uses too).
// Other pure helpers: eventsOf and latestEvent (events.go),
// representativePod and statusExplains (pod.go), classifyReadErr
// (access.go), gatedEverywhere, transientGate and podRequest (scheduler.go),
// countsRepeats and sameFailure (repeats.go).
//
// Each reader reads only what a decision can use given what the readers
// before it found (no events for a running pod, no nodes unless the
// scheduler's message needs them), so a wait that diagnoses on every poll
// costs a few reads.
package diagnose
