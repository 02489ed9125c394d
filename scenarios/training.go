package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/onsi/ginkgo/v2"

	"gpuconform.io/gpuconform/fixtures"
	"gpuconform.io/gpuconform/framework/checkpoints"
	"gpuconform.io/gpuconform/framework/gpu"
	"gpuconform.io/gpuconform/framework/testenv"
)

// training describes one checkpointing training Job (`gpu-workload train`) of the resilience scenarios.
type training struct {
	Name string
	// Steps of StepTime each, a checkpoint every Every steps; WriteTime simulates a slow checkpoint write.
	Steps, Every        int
	StepTime, WriteTime time.Duration
	// ResumedStepTime paces an attempt that resumed from a checkpoint (0: StepTime); ResumedMinTime is the
	// least such an attempt runs (0: no floor).
	ResumedStepTime, ResumedMinTime time.Duration
	// Storage is where checkpoints go; none: an emptyDir, which a replacement pod does not see.
	Storage checkpoints.Storage
	// Queue and Priority submit it through Kueue (LocalQueue, WorkloadPriorityClass).
	Queue, Priority string
	// Grace is the pod's termination grace period (0: the fixture's default).
	Grace time.Duration
	// EvictAfter is the tolerationSeconds for the not-ready/unreachable taints (0: the API server's).
	EvictAfter time.Duration
	Nodes      []string
	Devices    int
}

// checkpointClaim is the PersistentVolumeClaim of a spec's checkpoint storage.
const checkpointClaim = "checkpoints"

// ensureCheckpointStorage creates the spec's checkpoint PersistentVolumeClaim (and for a shared directory
// its PersistentVolume) once; it returns false when there is no storage that outlives a node.
func ensureCheckpointStorage(ctx context.Context, env *testenv.Env, ns string, s checkpoints.Storage, created *bool) bool {
	ginkgo.GinkgoHelper()
	if s.None() {
		return false
	}
	if !*created {
		ginkgo.By("offering checkpoint storage that outlives a node: " + s.String())
		for _, o := range s.Objects(env.Factory, ns, checkpointClaim) {
			env.Create(ctx, o)
		}
		*created = true
	}
	return true
}

// build returns the Job builder and the work ID its checkpoints are kept under.
func (t training) build(env *testenv.Env, ns string, path gpu.Path) (*fixtures.GPUJobWrapper, string) {
	devices := max(t.Devices, 1)
	w := env.Factory.GPUJob(t.Name, ns).Path(path).Devices(devices).BackoffLimit(4)
	if len(t.Nodes) > 0 {
		w.OnNodes(t.Nodes...)
	}
	if t.EvictAfter > 0 {
		w.EvictAfter(t.EvictAfter)
	}
	if t.Grace > 0 {
		w.GracePeriod(t.Grace)
	}
	workID := ns + "-" + w.Obj().Name
	if t.Storage.None() {
		w.ScratchDir("checkpoints", trainDir)
	} else {
		w.PersistentVolume(checkpointClaim, trainDir)
	}
	args := []string{"train", "--steps", strconv.Itoa(t.Steps), "--step-duration", t.StepTime.String(), "--checkpoint-every", strconv.Itoa(t.Every),
		"--checkpoint-dir", trainDir + "/" + workID, "--work-id", workID}
	if t.WriteTime > 0 {
		args = append(args, "--checkpoint-write-time", t.WriteTime.String())
	}
	if t.ResumedStepTime > 0 {
		args = append(args, "--resumed-step-duration", t.ResumedStepTime.String())
	}
	if t.ResumedMinTime > 0 {
		args = append(args, "--resumed-min-duration", t.ResumedMinTime.String())
	}
	w.Args(args...)
	if t.Queue != "" {
		w.Queue(t.Queue)
	}
	if t.Priority != "" {
		w.PriorityClass(t.Priority)
	}
	return w, workID
}

func (t training) String() string {
	return fmt.Sprintf("%d steps of %s, a checkpoint every %d", t.Steps, t.StepTime, t.Every)
}
