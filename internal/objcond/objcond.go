// Package objcond reads the status conditions of an object the suite holds unstructured (a Gateway API
// object, an APIService): as metav1.Conditions, so that apimachinery's meta.FindStatusCondition finds one
// by type, in one place.
package objcond

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Of is the condition list at fields of obj (status.conditions of an object, conditions of a status
// entry); entries that are not conditions are left out.
func Of(obj map[string]any, fields ...string) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(obj, fields...)
	out := make([]metav1.Condition, 0, len(raw))
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// Status is the status, reason and message of conds' condition of type typ: Unknown, with no reason,
// when there is none.
func Status(conds []metav1.Condition, typ string) (status, reason, message string) {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return string(c.Status), c.Reason, c.Message
	}
	return string(metav1.ConditionUnknown), "", "no " + typ + " condition"
}
