package diagnose

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// eventFailedCreate is a controller's event when the API server refuses the pods it creates.
const eventFailedCreate = "FailedCreate"

// EventTime is when an event last happened: its lastTimestamp, else its eventTime (events.k8s.io
// writers), else its firstTimestamp, else its creation.
func EventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// eventFirstTime is when an event first happened: its firstTimestamp, else its eventTime, else its
// creation.
func eventFirstTime(e corev1.Event) time.Time {
	switch {
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// eventsOf returns the events about one object, oldest first. An event that names another UID is about
// an earlier object of the same name and is left out; uid "" keeps them all.
func eventsOf(evs []corev1.Event, kind, name string, uid types.UID) []corev1.Event {
	var out []corev1.Event
	for _, e := range evs {
		if e.InvolvedObject.Kind != kind || e.InvolvedObject.Name != name {
			continue
		}
		if uid != "" && e.InvolvedObject.UID != "" && e.InvolvedObject.UID != uid {
			continue
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b corev1.Event) int { return EventTime(a).Compare(EventTime(b)) })
	return out
}

// latestEvent returns the newest event with one of the reasons.
func latestEvent(evs []corev1.Event, reasons ...string) *corev1.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if slices.Contains(reasons, evs[i].Reason) {
			return &evs[i]
		}
	}
	return nil
}
