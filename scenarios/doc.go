// Package scenarios holds the suite's scenarios. Each is one file that declares itself with Define (name,
// title, required by default or not, what it needs and uses, whether its steps are measured) and registers
// its specs from one typed input built once from the run (framework/suite.Run). It is written once against
// framework interfaces and registers its specs once per discovered allocation path (describePath). What a
// scenario cannot exercise on this cluster is not registered, and the reason is recorded (Base's
// NotExercised), never a silent skip or a false pass.
//
// The suite (suites/conformance), the label set (framework/labels), the verdict policy (RequiredLabels),
// the report (MeasuredLabels) and the preflight (Uses) read Registry; no scenario name appears anywhere
// else.
//
// # Layers
//
// The package has three layers, and a test (kit_test.go) holds them:
//   - the kit: kit.go (what a spec takes, Takes, and the locks derived from it), skeleton.go (Base, Spec,
//     describePath, the pool locks), registry.go and outcomes.go;
//   - the application checks, check_*.go: a pod sees exactly its devices (check_devices), a full node's
//     devices go one to each pod and a GPU pod's neighbours see none (check_isolation), the vendor's device
//     test, a gang's run, the sharing modes, a training job's resume, device health and recovery, a
//     pending pod's diagnosis, the platform's autoscalers and gateway. Scenarios compose them; the upgrade
//     rehearsal runs them on the upgraded canary;
//   - the scenarios, each in <name>.go (and <name>_*.go where it needs more than one file).
//
// A scenario's file uses the kit, the checks and its own scenario's files, never another scenario's.
//
// # Adding a scenario
//
//  1. One file, scenarios/<name>.go: an input type embedding Base with exactly what the specs read, a
//     const <name>Name, and `var <Name> = Define(Scenario{...}, func(r *suite.Run) <Name>Input {...},
//     <Name>Spec)`. Needs says what must be there for the scenario to be required and run; Uses what
//     some specs use where the run offers it (the preflight asks for both).
//  2. <Name>Spec(input func() <Name>Input): for each path in input().Paths, describePath(...) with
//     labels.Of(labels.Scenario(<name>Name), …). Each spec (or container) says what it needs of the
//     cluster while it runs as data, takes(Takes{...}) (kit.go): how much of its path's devices
//     (Devices: a few anywhere, the default; a few on each node; none; a few of one node, which it
//     leases with Spec.lease; every device of one node, Spec.Node; of a few nodes, Spec.leaseNodes; the
//     whole path; the whole pool; the canary pool), whether it stops a node (it calls Spec.stopping with
//     the node before it does) or fails a device, and whether it adds nodes. The kit derives its pool
//     locks (framework/poollock), its lock labels and its place in the run's order; scenario code names no
//     lock. Each It reads the live state from the *Spec it is handed. Call NotExercised with the reason
//     for every check it does not register.
//  3. One line in Registry (registry.go).
//  4. A fault of the fake GPU stack that one of its checks catches, and that row in `make selfcheck`;
//     new fixtures (builders) in fixtures/ if the workload shape is new.
package scenarios
