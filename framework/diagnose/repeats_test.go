package diagnose

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestDecideRepeats: a pull or create failure is final from repeatsFinal identical failures of the
// same container on; fewer, another container's, another failure's, or a pull that has since succeeded
// are not; and without the pod's events nothing is counted.
func TestDecideRepeats(t *testing.T) {
	// edit loads a file and changes its snapshot.
	edit := func(file string, change func(s *Snapshot)) *Snapshot {
		s := snapshotOf(t, file, pod(podName))
		change(s)
		return s
	}
	count := func(n int32) func(*Snapshot) {
		return func(s *Snapshot) { s.Events[0].Count = n }
	}
	for _, tc := range []struct {
		name     string
		s        *Snapshot
		reason   Reason
		terminal bool
		want     string // a text one message must contain
	}{
		{"create failed twice", edit("device-node-missing.yaml", count(2)), ContainerCreateFailed, false, "2 time(s)"},
		{"create failed three times", edit("device-node-missing.yaml", count(3)), ContainerCreateFailed, true, "node gpu-worker-1 failed to create container main 3 time(s)"},
		{"start failed three times", edit("device-node-missing.yaml", func(s *Snapshot) {
			s.Events[0].Count = 3
			s.Pods[0].Status.ContainerStatuses[0].State.Waiting.Reason = "RunContainerError"
		}), ContainerCreateFailed, true, "failed to start container main 3 time(s)"},
		{"combined by the event correlator", edit("device-node-missing.yaml", func(s *Snapshot) {
			s.Events[0].Count = 11
			s.Events[0].Message = combinedEventsPrefix + s.Events[0].Message
		}), ContainerCreateFailed, true, "11 time(s)"},
		{"counted as an events.k8s.io series", edit("device-node-missing.yaml", func(s *Snapshot) {
			s.Events[0].Count = 0
			s.Events[0].Series = &corev1.EventSeries{Count: 3}
		}), ContainerCreateFailed, true, "3 time(s)"},
		{"another container's failures do not count", edit("device-node-missing.yaml", func(s *Snapshot) {
			s.Events[0].Count = 5
			s.Events[0].InvolvedObject.FieldPath = "spec.initContainers{setup}"
		}), ContainerCreateFailed, false, "lstat /dev/nvidia0"},
		{"an earlier, different failure does not count", edit("device-node-missing.yaml", func(s *Snapshot) {
			old := s.Events[0]
			old.Name, old.Count, old.Message = "older", 5, "Error: failed to create containerd container: context deadline exceeded"
			old.LastTimestamp.Time = old.LastTimestamp.Add(-60e9)
			s.Events = append(s.Events, old)
		}), ContainerCreateFailed, false, "1 time(s)"},
		{"a config error is not a runtime failure", edit("container-create-failed.yaml", func(s *Snapshot) {
			s.Events = []corev1.Event{{
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: podName, UID: "5e5e-pod", FieldPath: "spec.containers{main}"},
				Reason:         eventFailed, Count: 5, Message: `Error: secret "hf-token" not found`,
			}}
		}), ContainerCreateFailed, false, "secret"},
		{"pull failed twice", edit("image-pull-once.yaml", count(2)), ImagePullFailed, false, "2 time(s)"},
		{"pull failed three times", edit("image-pull-once.yaml", count(3)), ImagePullFailed, true, "node gpu-worker-2 failed to pull the image of container main 3 time(s)"},
		{"pulled after three failures", edit("image-pull-once.yaml", func(s *Snapshot) {
			s.Events[0].Count = 3
			s.Pods[0].Status.Phase = corev1.PodRunning
			s.Pods[0].Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
		}), ReasonRunning, false, "phase Running"},
		// A DRA driver not registered on the pod's node: final from three failures, or from 30 s (the
		// kubelet's grace for a plugin to register again) however few the kubelet's retries.
		{"driver not registered twice in 10 s", edit("dra-not-registered.yaml", func(*Snapshot) {}), DRAPrepareFailed, false, "not final yet"},
		{"driver not registered three times", edit("dra-not-registered.yaml", count(3)), DRAPrepareFailed, true,
			"found DRA driver gpu.nvidia.com not registered 3 time(s)"},
		{"driver not registered for 30 s", edit("dra-not-registered.yaml", func(s *Snapshot) {
			s.Events[0].LastTimestamp.Time = s.Events[0].FirstTimestamp.Add(30e9)
		}), DRAPrepareFailed, true, "not registered 2 time(s) over 30s"},
		// The kubelet's back-off spaces its retries: two events 10 s apart, read 35 s after the first while
		// the failure is still its latest word, have lasted 35 s; read 20 s after, not long enough.
		{"driver not registered twice, still the latest word 35 s on", edit("dra-not-registered.yaml", func(s *Snapshot) {
			s.ReadAt = s.Events[0].FirstTimestamp.Add(35e9)
		}), DRAPrepareFailed, true, "not registered 2 time(s) over 10s"}, // final only through ReadAt: 2 events over 10 s are not
		{"driver not registered twice, read 20 s on", edit("dra-not-registered.yaml", func(s *Snapshot) {
			s.ReadAt = s.Events[0].FirstTimestamp.Add(20e9)
		}), DRAPrepareFailed, false, "not final yet"},
		{"driver not registered, counted over two events", edit("dra-not-registered.yaml", func(s *Snapshot) {
			older := s.Events[0]
			older.Name, older.Count = "older", 1
			older.FirstTimestamp.Time, older.LastTimestamp.Time = older.FirstTimestamp.Add(-10e9), older.FirstTimestamp.Add(-10e9)
			s.Events = append(s.Events, older)
		}), DRAPrepareFailed, true, "not registered 3 time(s) over 20s"},
		{"a driver that registered since fails otherwise", edit("dra-not-registered.yaml", func(s *Snapshot) {
			s.Events[0].Count = 5
			newer := s.Events[0]
			newer.Name, newer.Count, newer.Message = "newer", 1, "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim train-0-x7k2p-gpu-6xq9d: device gpu-0 is not healthy"
			newer.FirstTimestamp.Time, newer.LastTimestamp.Time = newer.LastTimestamp.Add(5e9), newer.LastTimestamp.Add(5e9)
			s.Events = append(s.Events, newer)
		}), DRAPrepareFailed, false, "device gpu-0 is not healthy"},
		{"another prepare failure repeated is not this one", edit("dra-prepare-failed.yaml", func(s *Snapshot) { s.Events[0].Count = 5 }), DRAPrepareFailed, false, "is not healthy"},
		{"events unreadable", edit("image-pull-unreachable.yaml", func(s *Snapshot) {
			s.Errors = append(s.Errors, ReadError{Read: eventsRead("ml", "Pod", podName), Err: forbidden("list", "events")})
		}), ImagePullFailed, false, "repeated failures are not counted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Decide(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Reason != tc.reason || res.Terminal != tc.terminal {
				t.Errorf("%s terminal=%v, want %s terminal=%v\n%s", res.Reason, res.Terminal, tc.reason, tc.terminal, res)
			}
			if !containsText(res.Messages, tc.want) {
				t.Errorf("no message contains %q\n%s", tc.want, res)
			}
		})
	}
}

// TestSameFailure: failures differ only in the runtime's IDs and the correlator's prefix.
func TestSameFailure(t *testing.T) {
	a := `Error: failed to generate container "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90" spec: failed to generate spec: CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=0`
	b := combinedEventsPrefix + `Error: failed to generate container "0718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6" spec: failed to generate spec: CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=0`
	c := `Error: failed to generate container "0718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6" spec: failed to generate spec: CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=1`
	if !sameFailure(a, b) {
		t.Error("two creates that differ in container ID are different failures")
	}
	if sameFailure(a, c) {
		t.Error("failures for different devices are the same")
	}
}
