package cluster

import (
	"testing"
	"time"
)

func TestParsePodsReady(t *testing.T) {
	off, err := parsePodsReady("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n")
	if err != nil || off != nil {
		t.Fatalf("no waitForPodsReady: got %v, %v; want off", off, err)
	}
	on, err := parsePodsReady(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
waitForPodsReady:
  timeout: 45s
  requeuingStrategy:
    backoffBaseSeconds: 5
`)
	if err != nil || on == nil {
		t.Fatalf("waitForPodsReady set: got %v, %v", on, err)
	}
	// Kueue's defaulting: the recovery timeout is the timeout when unset.
	want := PodsReady{Timeout: 45 * time.Second, RecoveryTimeout: 45 * time.Second, BackoffBase: 5 * time.Second}
	if *on != want {
		t.Fatalf("got %+v, want %+v", *on, want)
	}
	if _, err := parsePodsReady("waitForPodsReady: [nonsense"); err == nil {
		t.Fatal("an unparseable Configuration must be an error, not off")
	}
}
