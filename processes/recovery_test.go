package processes

import (
	"encoding/json"
	"testing"
)

// A process ended by its cancel request names the request's reason
// whichever writer ends it: the worker running it or a sweep after.
func TestRecoverCancelNamesTheRequest(t *testing.T) {
	for _, c := range []struct {
		data json.RawMessage
		want string
	}{
		{json.RawMessage(`{"reason":"no longer needed"}`), "cancel request, event 3: no longer needed"},
		{nil, "cancel request, event 3"},
		{json.RawMessage(`{}`), "cancel request, event 3"},
		{json.RawMessage(`not json`), "cancel request, event 3"},
	} {
		p := &Process{CancelRequested: &Event{N: 3, Type: TypeCancelRequested, Data: c.data}}
		action, why := Recover(p, Facts{})
		if action != CancelRun || why != c.want {
			t.Errorf("Recover with request data %s = %s, %q; want %s, %q", c.data, action, why, CancelRun, c.want)
		}
	}
}
