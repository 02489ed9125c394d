package reports

import (
	"encoding/json"
	"fmt"

	"github.com/onsi/ginkgo/v2/types"

	"gpuconform.io/gpuconform/framework/gpu"
)

// ObservedSharing summarises the replica IDs the run's specs recorded (gpu.ReplicasEntry): "8 replicas of
// 4 GPUs, up to 2 per GPU"; "" when no spec saw a replica ID. It is what pods were actually given, beside
// the labels' claim, so a cluster labelled time-slicing that hands out whole GPUs (or the reverse) shows.
func ObservedSharing(suites []types.Report) string {
	perGPU := map[string]map[string]bool{} // node/physical GPU → its replica IDs seen
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			for _, e := range sp.ReportEntries {
				if e.Name != gpu.ReplicasEntry {
					continue
				}
				var o gpu.ReplicaObservation
				data, err := json.Marshal(e.Value.GetRawValue())
				if err != nil || json.Unmarshal(data, &o) != nil {
					continue
				}
				for _, id := range o.IDs {
					d := gpu.ParseDeviceID(id)
					if !d.Replicated {
						continue
					}
					key := o.Node + "/" + d.Physical
					if perGPU[key] == nil {
						perGPU[key] = map[string]bool{}
					}
					perGPU[key][id] = true
				}
			}
		}
	}
	if len(perGPU) == 0 {
		return ""
	}
	replicas, most := 0, 0
	for _, ids := range perGPU {
		replicas += len(ids)
		most = max(most, len(ids))
	}
	return fmt.Sprintf("%s of %s, up to %d per GPU", quantity(replicas, "replica"), quantity(len(perGPU), "GPU"), most)
}

// SharingText is the record's sharing line: the mode and replicas the labels claim and, when the run saw
// replica IDs, what pods held: "time-slicing (2 replicas); observed: 8 replicas of 4 GPUs, up to 2 per GPU".
func SharingText(rec Record, suites []types.Report) string {
	text := rec.Sharing.Mode
	if rec.Sharing.Replicas > 0 {
		text += fmt.Sprintf(" (%d replicas)", rec.Sharing.Replicas)
	}
	observed := ObservedSharing(suites)
	if observed == "" {
		observed = rec.ObservedSharing
	}
	if observed != "" {
		text += "; observed: " + observed
	}
	return text
}

func quantity(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
