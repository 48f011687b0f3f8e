package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/lash-run/lash/tools"
	"github.com/lash-run/lash/turn"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files under testdata/")

func orderTool(t *testing.T, got *OrderArgs) tools.Tool {
	t.Helper()
	tool, err := tools.Func("order", "Place an order.", func(ctx context.Context, a OrderArgs) (string, error) {
		if got != nil {
			*got = a
		}
		return "ordered for " + a.Customer, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func TestFuncSchemaGolden(t *testing.T) {
	spec := orderTool(t, nil).Spec()
	if spec.Name != "order" || spec.Description != "Place an order." {
		t.Fatalf("spec = %+v", spec)
	}
	golden := filepath.Join("testdata", "order_args.schema.json")
	if *rewrite {
		if err := os.WriteFile(golden, []byte(spec.Schema+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Schema+"\n" != string(want) {
		t.Errorf("schema differs from %s (rerun with -rewrite if the change is understood)\ngot:  %s\nwant: %s", golden, spec.Schema, want)
	}
	if !json.Valid([]byte(spec.Schema)) {
		t.Errorf("schema is not valid JSON")
	}
}

func TestFuncSchemaDeterministic(t *testing.T) {
	first := orderTool(t, nil).Spec().Schema
	for range 20 {
		if again := orderTool(t, nil).Spec().Schema; again != first {
			t.Fatalf("second derivation differs:\n%s\n%s", first, again)
		}
	}
}

func TestFuncDecodes(t *testing.T) {
	var got OrderArgs
	tool := orderTool(t, &got)
	args := `{"customer":"Ada","ship":{"street":"1 Main St","city":"Springfield","zip":12345},` +
		`"items":[{"sku":"tea","qty":2},{"sku":"jam","qty":1,"note":"ripe"}],"express":true,"gift":null}`
	res, err := tool.Call(context.Background(), json.RawMessage(args))
	if err != nil || res.Output != "ordered for Ada" || res.Status != turn.ToolOK {
		t.Fatalf("Call = %+v, %v", res, err)
	}
	zip, note := 12345, "ripe"
	want := OrderArgs{
		Customer: "Ada",
		Ship:     Address{Street: "1 Main St", City: "Springfield", Zip: &zip},
		Items:    []Item{{SKU: "tea", Qty: 2}, {SKU: "jam", Qty: 1, Note: &note}},
		Express:  true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func TestFuncInvalidArguments(t *testing.T) {
	const ship = `"ship":{"street":"1 Main St","city":"Springfield"}`
	for _, tc := range []struct {
		name, args, want string
	}{
		{"malformed", `{"customer":`, `malformed JSON: unexpected end of JSON input (at byte 12)`},
		{"malformed token", `{"customer" "Ada"}`, `malformed JSON: invalid character '"' after object key (at byte 13)`},
		{"trailing data", `{} {}`, `malformed JSON: invalid character '{' after top-level value (at byte 4)`},
		{"not an object", `["Ada"]`, `arguments: got array, want object`},
		{"null", `null`, `arguments: got null, want object`},
		{"missing one", `{"customer":"Ada","items":[]}`, `missing required field "ship"`},
		{"missing all", `{}`, `missing required fields "customer", "ship", "items"`},
		{"empty is {}", ``, `missing required fields "customer", "ship", "items"`},
		{"missing nested", `{"customer":"Ada","ship":{"street":"1 Main St"},"items":[]}`, `missing required field "ship.city"`},
		{"wrong type", `{"customer":42,` + ship + `,"items":[]}`, `field "customer": got integer, want string`},
		{"wrong nested type", `{"customer":"Ada","ship":{"street":"1 Main St","city":7},"items":[]}`, `field "ship.city": got integer, want string`},
		{"null struct", `{"customer":"Ada","ship":null,"items":[]}`, `field "ship": got null, want object`},
		{"wrong item type", `{"customer":"Ada",` + ship + `,"items":[{"sku":"tea","qty":2},{"sku":"jam","qty":1.5}]}`, `field "items[1].qty": got number, want integer`},
		{"out of range", `{"customer":"Ada",` + ship + `,"items":[{"sku":"tea","qty":300}]}`, `field "items[0].qty": 300 is greater than the maximum 255`},
		{"unknown field", `{"customer":"Ada",` + ship + `,"items":[],"colour":"red"}`,
			`unknown field "colour" (known fields: "customer", "ship", "bill", "items", "tags", "express", "gift")`},
		{"unknown fields, sorted", `{"customer":"Ada",` + ship + `,"items":[],"zeta":1,"alpha":2}`,
			`unknown fields "alpha", "zeta" (known fields: "customer", "ship", "bill", "items", "tags", "express", "gift")`},
		{"field names are case-sensitive", `{"Customer":"Ada",` + ship + `,"items":[]}`,
			`unknown field "Customer" (known fields: "customer", "ship", "bill", "items", "tags", "express", "gift")`},
		{"unknown nested field", `{"customer":"Ada","ship":{"street":"1 Main St","city":"Springfield","country":"US"},"items":[]}`,
			`unknown field "ship.country" (known fields of "ship": "street", "city", "zip")`},
		{"ignored go field", `{"customer":"Ada",` + ship + `,"items":[],"Note":"x"}`,
			`unknown field "Note" (known fields: "customer", "ship", "bill", "items", "tags", "express", "gift")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			tool, err := tools.Func("order", "", func(ctx context.Context, a OrderArgs) (string, error) {
				called = true
				return "", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := tool.Call(context.Background(), json.RawMessage(tc.args))
			if err != nil {
				t.Fatalf("Call returned a Go error %v; want a tool error result", err)
			}
			if res.Status != turn.ToolError || res.Output != "invalid arguments: "+tc.want {
				t.Errorf("got %v %q\nwant error %q", res.Status, res.Output, "invalid arguments: "+tc.want)
			}
			if called {
				t.Error("the function ran with invalid arguments")
			}
		})
	}
}

type Color string

type PaintArgs struct {
	Color Color `json:"color"`
}

// A constraint explain does not know about falls back to jsonschema-go's
// own message.
func TestFuncValidatorFallback(t *testing.T) {
	opts := &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[Color](): {Type: "string", Enum: []any{"red", "green"}},
	}}
	tool, err := tools.Func("paint", "", func(ctx context.Context, a PaintArgs) (string, error) {
		return string(a.Color), nil
	}, tools.WithSchemaOptions(opts))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"object","properties":{"color":{"type":"string","enum":["red","green"]}},"required":["color"],"additionalProperties":false}`; tool.Spec().Schema != want {
		t.Errorf("schema %s\nwant   %s", tool.Spec().Schema, want)
	}
	res, err := tool.Call(context.Background(), json.RawMessage(`{"color":"blue"}`))
	if err != nil || res.Status != turn.ToolError || !strings.Contains(res.Output, "enum") || !strings.Contains(res.Output, "blue") {
		t.Errorf("Call = %+v, %v; want an enum failure", res, err)
	}
	res, err = tool.Call(context.Background(), json.RawMessage(`{"color":"red"}`))
	if err != nil || res.Status != turn.ToolOK || res.Output != "red" {
		t.Errorf("Call = %+v, %v", res, err)
	}
}

func TestFuncNoArguments(t *testing.T) {
	tool, err := tools.Func("now", "", func(ctx context.Context, _ struct{}) (string, error) { return "noon", nil })
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"object","additionalProperties":false}`; tool.Spec().Schema != want {
		t.Errorf("schema %s, want %s", tool.Spec().Schema, want)
	}
	for _, args := range []string{``, ` `, `{}`} {
		if res, err := tool.Call(context.Background(), json.RawMessage(args)); err != nil || res.Output != "noon" {
			t.Errorf("Call(%q) = %+v, %v", args, res, err)
		}
	}
	res, _ := tool.Call(context.Background(), json.RawMessage(`{"at":1}`))
	if want := `invalid arguments: unknown field "at" (arguments takes no fields)`; res.Output != want {
		t.Errorf("got %q, want %q", res.Output, want)
	}
}

// {} skips the decoder for a struct (its zero value is what {} decodes
// to) but not for a map, whose callers may write to what they get.
func TestFuncEmptyArguments(t *testing.T) {
	type opts struct {
		Limit int    `json:"limit,omitempty"`
		Tag   string `json:"tag,omitempty"`
	}
	st, err := tools.Func("opts", "", func(ctx context.Context, a opts) (string, error) { return fmt.Sprintf("%+v", a), nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`{}`, `{"limit":3}`, `{}`} {
		want := "{Limit:0 Tag:}"
		if args != "{}" {
			want = "{Limit:3 Tag:}"
		}
		if res, err := st.Call(context.Background(), json.RawMessage(args)); err != nil || res.Output != want {
			t.Errorf("Call(%s) = %+v, %v, want %s", args, res, err, want)
		}
	}
	var seen []map[string]any
	mt, err := tools.Func("bag", "", func(ctx context.Context, a map[string]any) (string, error) {
		if a == nil {
			return "nil", nil
		}
		a["touched"] = true
		seen = append(seen, a)
		return fmt.Sprint(len(a)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if res, err := mt.Call(context.Background(), json.RawMessage(`{}`)); err != nil || res.Output != "1" {
			t.Errorf("map Call({}) = %+v, %v, want a fresh empty map", res, err)
		}
	}
	if len(seen) == 2 && reflect.ValueOf(seen[0]).Pointer() == reflect.ValueOf(seen[1]).Pointer() {
		t.Error("two calls shared one map")
	}
}

func TestFuncRefusesBadDefinitions(t *testing.T) {
	fn := func(ctx context.Context, n int) (string, error) { return "", nil }
	if _, err := tools.Func("count", "", fn); !errors.Is(err, tools.ErrInvalidSpec) {
		t.Errorf("non-object arguments: err = %v, want ErrInvalidSpec", err)
	}
	type WithChan struct {
		C chan int `json:"c"`
	}
	if _, err := tools.Func("chan", "", func(ctx context.Context, a WithChan) (string, error) { return "", nil }); !errors.Is(err, tools.ErrInvalidSpec) {
		t.Errorf("chan field: err = %v, want ErrInvalidSpec", err)
	}
	if _, err := tools.Func("bad name", "", func(ctx context.Context, a OrderArgs) (string, error) { return "", nil }); !errors.Is(err, tools.ErrInvalidName) {
		t.Errorf("bad name: err = %v, want ErrInvalidName", err)
	}
	if _, err := tools.Func[OrderArgs]("nil", "", nil); !errors.Is(err, tools.ErrInvalidSpec) {
		t.Errorf("nil fn: err = %v, want ErrInvalidSpec", err)
	}
}

func TestFuncErrorsAndPending(t *testing.T) {
	type Args struct {
		Mode string `json:"mode"`
	}
	sentinel := errors.New("no such customer")
	tool, err := tools.Func("x", "", func(ctx context.Context, a Args) (string, error) {
		switch a.Mode {
		case "fail":
			return "", sentinel
		case "pending":
			return "", tools.Pending("needs approval")
		case "panic":
			panic("kaboom")
		}
		return "ok", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := tool.Call(ctx, json.RawMessage(`{"mode":"fail"}`)); !errors.Is(err, sentinel) {
		t.Errorf("fail: err = %v", err)
	}
	var pe *tools.PendingError
	if _, err := tool.Call(ctx, json.RawMessage(`{"mode":"pending"}`)); !errors.As(err, &pe) || pe.Ticket != "needs approval" {
		t.Errorf("pending: err = %v", err)
	}
	var panicked *tools.PanicError
	if _, err := tool.Call(ctx, json.RawMessage(`{"mode":"panic"}`)); !errors.As(err, &panicked) || panicked.Value != "kaboom" || len(panicked.Stack) == 0 {
		t.Errorf("panic: err = %v", err)
	}
}
