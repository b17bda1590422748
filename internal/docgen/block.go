package docgen

import (
	"bytes"
	"fmt"
)

// Block is a generated part of a hand-written page: the lines between
// its begin marker and blockEnd.
type Block struct {
	// Path is the page's path from the repository root.
	Path string
	// Source is the file the part is generated from.
	Source string
	// Content is the part as the source describes it now.
	Content []byte
}

const blockEnd = "<!-- End of the part make generate writes. -->"

func (b Block) begin() string {
	return fmt.Sprintf("<!-- make generate writes from here to the end marker, from %s. -->", b.Source)
}

// Into returns page with the lines between the block's markers replaced
// by its content. A page without both markers, in order, is an error.
func (b Block) Into(page []byte) ([]byte, error) {
	begin := []byte(b.begin() + "\n")
	start := bytes.Index(page, begin)
	if start < 0 {
		return nil, fmt.Errorf("%s has no line %q", b.Path, b.begin())
	}
	from := start + len(begin)
	end := bytes.Index(page[from:], []byte(blockEnd))
	if end < 0 {
		return nil, fmt.Errorf("%s has no line %q after %q", b.Path, blockEnd, b.begin())
	}
	out := append([]byte{}, page[:from]...)
	out = append(out, b.Content...)
	return append(out, page[from+end:]...), nil
}
