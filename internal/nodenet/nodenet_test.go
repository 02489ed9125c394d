package nodenet

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name, cidr, ip string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	if ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
	}
	return n
}

func TestRoutesSkipSelfAndIncompleteNodes(t *testing.T) {
	nodes := []corev1.Node{
		node("b", "10.244.2.0/24", "172.18.0.3"),
		node("self", "10.244.0.0/24", "172.18.0.2"),
		node("a", "10.244.1.0/24", "172.18.0.4"),
		node("no-cidr", "", "172.18.0.5"),
		node("no-ip", "10.244.3.0/24", ""),
	}
	got := Routes(nodes, "self")
	want := []Route{{"10.244.1.0/24", "172.18.0.4"}, {"10.244.2.0/24", "172.18.0.3"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Routes = %v, want %v", got, want)
	}
}

func TestConflist(t *testing.T) {
	b, err := Conflist("10.244.1.0/24", 1500)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type string `json:"type"`
			IPAM struct {
				Type   string `json:"type"`
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Plugins) != 2 || c.Plugins[0].Type != "ptp" || c.Plugins[1].Type != "portmap" {
		t.Fatalf("plugins = %+v", c.Plugins)
	}
	if c.Plugins[0].IPAM.Type != "host-local" || c.Plugins[0].IPAM.Ranges[0][0].Subnet != "10.244.1.0/24" {
		t.Errorf("ipam = %+v", c.Plugins[0].IPAM)
	}
	if _, err := Conflist("not-a-cidr", 1500); err == nil {
		t.Error("bad CIDR accepted")
	}
}
