package serve

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A stand-in gateway: requests with X-Model: b go to b; the others, one in four to b, the rest to a.
func splitting(t *testing.T) *httptest.Server {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		server := "a"
		if r.Header.Get("X-Model") == "b" || n.Add(1)%4 == 0 {
			server = "b"
		}
		infer(server)(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestAskTalliesWhichServerAnsweredEachSet(t *testing.T) {
	srv := splitting(t)
	var out bytes.Buffer
	if err := Ask(t.Context(), AskOptions{URL: srv.URL + "/v1/infer", Requests: 8, Header: "X-Model: b", ReadyWithin: 5 * time.Second}, &out); err != nil {
		t.Fatalf("Ask: %v", err)
	}
	var got Tally
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("not one JSON tally: %v\n%s", err, out.String())
	}
	// One plain request was the readiness probe (the fourth overall goes to b): 8 counted after it.
	if sum(got.Plain) != 8 || got.Plain["b"] != 2 || got.Plain["a"] != 6 {
		t.Errorf("plain tally %v, want a:6 b:2", got.Plain)
	}
	if !maps.Equal(got.WithHeader, map[string]int{"b": 8}) || got.Failed != 0 || got.Event != TallyEvent {
		t.Errorf("tally %+v, want every header request answered by b and none failed", got)
	}
}

func TestAskWithoutAnAnswerSaysNotReady(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no route", http.StatusNotFound)
	}))
	defer srv.Close()
	var out bytes.Buffer
	err := Ask(t.Context(), AskOptions{URL: srv.URL, Requests: 3, ReadyWithin: 700 * time.Millisecond}, &out)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Ask = %v, want the 404 that kept it from being ready", err)
	}
	var got Tally
	if json.Unmarshal(out.Bytes(), &got) != nil || got.Event != NotReadyEvent || !strings.Contains(got.FirstError, "no route") {
		t.Fatalf("printed %s, want a not-ready tally with the answer", out.String())
	}
}

func TestAskRefusesAnAnswerThatNamesNoServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"ok":true}`)) }))
	defer srv.Close()
	if _, err := askOnce(t.Context(), srv.URL, nil); err == nil || !strings.Contains(err.Error(), "not as the model server does") {
		t.Fatalf("askOnce = %v, want an error: something other than the model server answered", err)
	}
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}
