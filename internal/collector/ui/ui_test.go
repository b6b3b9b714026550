package ui

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/collector/history"
)

// A map request takes one of the history's query slots: with all of them
// taken it is refused (429, counted like a GetFlows refusal), and served
// once one is free.
func TestQuerySlots(t *testing.T) {
	h := history.NewService(history.Options{Size: 10, MaxAge: time.Hour, MaxQueries: 1})
	srv := Handler(Options{History: h})
	_, release, err := h.Snapshot() // a query under way
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", PathGraph, nil))
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "1" ||
		!strings.Contains(rec.Body.String(), `"error":"1 queries under way, max 1 (--history-max-queries)"`) {
		t.Errorf("with every slot taken: %d %q", rec.Code, rec.Body)
	}
	if n := h.Stats.Refusals(history.RefusedQueries); n != 1 {
		t.Errorf("%d refusals counted, want 1", n)
	}
	release()
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", PathGraph, nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"nodes":[]`) {
		t.Errorf("with a slot free: %d %q", rec.Code, rec.Body)
	}
	// The slot was given back: another request is served too.
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", PathFlows+"?source=a&target=b", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"flows":[]`) {
		t.Errorf("flows: %d %q", rec.Code, rec.Body)
	}
}
