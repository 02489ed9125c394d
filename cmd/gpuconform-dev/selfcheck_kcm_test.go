package main

import (
	"strings"
	"testing"
)

// The fault disables one controller on top of kubeadm's --controllers, or adds the flag where none is.
func TestWithoutTaintEvictionEditsTheManifestsCommand(t *testing.T) {
	kubeadm := "spec:\n  containers:\n  - command:\n    - kube-controller-manager\n    - --controllers=*,bootstrapsigner,tokencleaner\n    - --leader-elect=true\n"
	got, err := withoutController([]byte(kubeadm), taintEvictionController)
	if err != nil || !strings.Contains(string(got), "    - --controllers=*,bootstrapsigner,tokencleaner,-device-taint-eviction-controller\n    - --leader-elect=true\n") {
		t.Errorf("kubeadm's flag: %q (%v)", got, err)
	}
	bare := "spec:\n  containers:\n  - command:\n    - kube-controller-manager\n    - --leader-elect=true\n"
	got, err = withoutController([]byte(bare), taintEvictionController)
	if err != nil || !strings.Contains(string(got), "    - kube-controller-manager\n    - --controllers=*,-device-taint-eviction-controller\n    - --leader-elect=true\n") {
		t.Errorf("no flag: %q (%v)", got, err)
	}
	if _, err := withoutController([]byte("spec: {}\n"), taintEvictionController); err == nil {
		t.Error("a manifest without kube-controller-manager's command: no error")
	}
}
