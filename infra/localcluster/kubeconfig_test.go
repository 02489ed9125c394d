package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A revive rewrites the kubeconfig only when it cannot reach the cluster: missing, unreadable, or naming
// another API server port than the control plane publishes (the cluster was recreated from another
// checkout). One that matches, or a port that docker did not report, leaves it as it is.
func TestStaleKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, server string) string {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["kind-gpuconform"] = &clientcmdapi.Cluster{Server: server}
		cfg.AuthInfos["kind-gpuconform"] = &clientcmdapi.AuthInfo{Token: "t"}
		cfg.Contexts["kind-gpuconform"] = &clientcmdapi.Context{Cluster: "kind-gpuconform", AuthInfo: "kind-gpuconform"}
		cfg.CurrentContext = "kind-gpuconform"
		path := filepath.Join(dir, name)
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	current := write("current", "https://127.0.0.1:41849")
	garbled := filepath.Join(dir, "garbled")
	if err := os.WriteFile(garbled, []byte("clusters: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, port, want string
	}{
		{"same port", current, "41849", ""},
		{"port unknown", current, "", ""},
		{"recreated elsewhere", current, "37215", "names API server https://127.0.0.1:41849, the cluster publishes port 37215"},
		{"missing", filepath.Join(dir, "none"), "41849", "there is none"},
		{"missing, port unknown", filepath.Join(dir, "none"), "", "there is none"},
		{"garbled", garbled, "41849", "cannot be read"},
		{"no port in the server", write("noport", "https://127.0.0.1"), "41849", "names API server https://127.0.0.1,"},
	}
	for _, c := range cases {
		got := staleKubeconfig(c.path, c.port)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: staleKubeconfig = %q, want %q", c.name, got, c.want)
		}
	}
}
