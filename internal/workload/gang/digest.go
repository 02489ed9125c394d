package gang

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// The simulated model. Every worker starts from the same digest, and each step replaces it with a
// hash over every worker's contribution to that step, so no worker can advance without all the
// others, and every worker holds the same digest after every step.

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// initialDigest is the state before step 1. It depends on the world size, so a gang of another size
// never produces the digest of this one.
func initialDigest(workID string, workers int) string {
	return hashHex("gpu-workload/gang/" + workID + "/" + strconv.Itoa(workers))
}

// contribution is what rank adds to step, computed from its digest after the previous step.
func contribution(digest string, step, rank int) string {
	return hashHex(digest + "/" + strconv.Itoa(step) + "/" + strconv.Itoa(rank))
}

// combine is the stand-in for an all-reduce: a hash over every rank's contribution in rank order.
// Contributions are fixed-length hex, so plain concatenation is unambiguous.
func combine(contributions []string) string {
	return hashHex(strings.Join(contributions, ""))
}

// nextDigest is a worker's digest after a step whose contributions combined to combined.
func nextDigest(digest, combined string) string {
	return hashHex(digest + combined)
}

// Digest is the state digest every worker of an uninterrupted gang of the given size ends with
// once it has run the given number of steps of work workID; a gang that was interrupted and
// resumed must end with the same.
func Digest(workID string, workers, steps int) string {
	d := initialDigest(workID, workers)
	contribs := make([]string, workers)
	for step := 1; step <= steps; step++ {
		for r := range contribs {
			contribs[r] = contribution(d, step, r)
		}
		d = nextDigest(d, combine(contribs))
	}
	return d
}
