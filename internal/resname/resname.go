// Package resname tells the kinds of resource names in a pod's requests apart, as the scheduler and the
// quota evaluator do.
package resname

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Extended reports an extended resource (nvidia.com/gpu) or an implicit DRA extended resource
// (deviceclass.resource.kubernetes.io/<class>): what the scheduler's IsExtendedResourceName and
// IsDRAExtendedResourceName accept, and what the pod evaluator charges as requests.<name>. Native names
// (cpu, memory, anything in kubernetes.io) and requests.* are not.
func Extended(name corev1.ResourceName) bool {
	s := string(name)
	if strings.HasPrefix(s, resourcev1.ResourceDeviceClassPrefix) {
		return true
	}
	native := !strings.Contains(s, "/") || strings.Contains(s, corev1.ResourceDefaultNamespacePrefix)
	return !native && !strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) &&
		len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+s)) == 0
}
