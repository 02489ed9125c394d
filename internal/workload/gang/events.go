package gang

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// eventWriter prints progress events as JSON lines, each with the worker's rank. Like train's, it
// keeps the first write error instead of failing the step; Run reports it at the end.
type eventWriter struct {
	mu   sync.Mutex
	w    io.Writer
	now  func() time.Time
	rank int
	err  error
}

func (e *eventWriter) emit(fields map[string]any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fields["time"] = e.now().UTC().Format(time.RFC3339Nano)
	fields["rank"] = e.rank
	line, err := json.Marshal(fields)
	if err == nil {
		_, err = fmt.Fprintf(e.w, "%s\n", line)
	}
	if err != nil && e.err == nil {
		e.err = err
	}
}

// lockedWriter serialises writes from the worker and, on rank 0, the coordinator.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return len(p), nil
	}
	return l.w.Write(p)
}
