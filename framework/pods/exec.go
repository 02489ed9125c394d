package pods

import (
	"bytes"
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"gpuconform.io/gpuconform/framework/testenv"
)

// Exec runs command in a running container of the pod, as `kubectl exec` does (the pods/exec subresource),
// and returns what it printed. err is the exec's failure: the command's non-zero exit ("command terminated
// with exit code N") or the runtime's refusal to start it (a missing executable), which the API server
// passes on.
func Exec(ctx context.Context, env *testenv.Env, ns, pod, container string, command []string) (stdout, stderr string, err error) {
	req := env.Clients.Kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(env.Clients.REST, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}
