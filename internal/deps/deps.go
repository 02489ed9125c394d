// Package deps pins the project's library dependencies while the packages that use them are being written.
package deps

import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "google.golang.org/grpc"
	_ "k8s.io/api/resource/v1"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/dynamic-resource-allocation/kubeletplugin"
	_ "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	_ "sigs.k8s.io/e2e-framework/klient"
	_ "sigs.k8s.io/e2e-framework/pkg/envconf"
	_ "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	_ "sigs.k8s.io/kueue/client-go/clientset/versioned"
	_ "sigs.k8s.io/yaml"
)
