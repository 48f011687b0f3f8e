package tools_test

// Address is a nested struct with an optional pointer field.
type Address struct {
	Street string `json:"street" jsonschema:"street and number"`
	City   string `json:"city"`
	Zip    *int   `json:"zip,omitempty" jsonschema:"postal code, if known"`
}

// Item is an element of a slice field.
type Item struct {
	SKU  string  `json:"sku"`
	Qty  uint8   `json:"qty" jsonschema:"how many, up to 255"`
	Note *string `json:"note" jsonschema:"a pointer without omitempty: optional too"`
}

// OrderArgs is the arguments struct of the "order" test tool.
type OrderArgs struct {
	Customer string   `json:"customer" jsonschema:"the customer's name"`
	Ship     Address  `json:"ship"`
	Bill     *Address `json:"bill,omitempty" jsonschema:"billing address; the shipping address if absent"`
	Items    []Item   `json:"items" jsonschema:"what to order"`
	Tags     []string `json:"tags,omitempty"`
	Express  bool     `json:"express,omitempty"`
	Gift     *bool    `json:"gift"`
	Note     string   `json:"-"`
}
