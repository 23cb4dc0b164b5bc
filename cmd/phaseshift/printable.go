package main

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// What the command prints comes in part from the files it reads (a
// header's phase, writer, boot ID and reason for being behind; keys;
// values; another node's file, with a checksum anyone can recompute), and
// a person reads it in a terminal, which takes ESC and the C1 controls
// (U+0080-U+009F) as commands: a file could move the cursor, rewrite
// what was printed before or set the window title. So every byte the
// command writes, to stdout and stderr, text and JSON alike, passes one
// filter, printable, which writes each character a terminal could act on
// as a JSON escape \uXXXX (a surrogate pair above U+FFFF):
//
//   - the C0 controls but newline and tab, DEL and the C1 controls;
//   - the Unicode format characters (category Cf: the bidirectional
//     overrides, zero-width joiners), which reorder or hide text;
//   - U+2028 and U+2029, which some terminals and editors take as ends of
//     lines;
//   - a byte that is not valid UTF-8, as \ufffd.
//
// Inside a JSON string the escape is the same character (encoding/json
// escapes the C0 controls itself, but not DEL, the C1 controls or the
// format characters), so the JSON the command prints keeps its meaning
// (bytes that are not UTF-8 read as U+FFFD, as Go's decoder reads them);
// outside a string, valid JSON holds none of these characters (list, get
// and diff print values compacted: see compactJSON); in text, the escape
// shows which character was there.
type printable struct {
	w     io.Writer
	carry []byte // the start of a character cut by the end of a Write
	buf   []byte
}

func newPrintable(w io.Writer) *printable { return &printable{w: w} }

// Write writes p with the characters above escaped. It reports len(p)
// written when the escaped bytes were.
func (p *printable) Write(b []byte) (int, error) {
	in := b
	if len(p.carry) > 0 {
		in = append(p.carry, b...)
		p.carry = nil
	}
	out := p.buf[:0]
	for len(in) > 0 {
		r, size := utf8.DecodeRune(in)
		if r == utf8.RuneError && size <= 1 && !utf8.FullRune(in) {
			p.carry = append([]byte(nil), in...) // the rest comes with the next Write
			break
		}
		switch {
		case r == utf8.RuneError && size <= 1:
			out = append(out, `\ufffd`...)
		case needsEscape(r):
			out = appendEscape(out, r)
		default:
			out = append(out, in[:size]...)
		}
		in = in[size:]
	}
	p.buf = out
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush writes what is left of a character cut short, as \ufffd.
func (p *printable) Flush() error {
	if len(p.carry) == 0 {
		return nil
	}
	n := len(p.carry)
	p.carry = nil
	for range n {
		if _, err := io.WriteString(p.w, `\ufffd`); err != nil {
			return err
		}
	}
	return nil
}

// needsEscape reports whether a terminal could take r for a command, or r
// hides or reorders the text around it.
func needsEscape(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case unicode.IsControl(r): // C0, DEL, C1
		return true
	case r == '\u2028' || r == '\u2029':
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

func appendEscape(out []byte, r rune) []byte {
	if r > 0xffff {
		r1, r2 := utf16.EncodeRune(r)
		return fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
	}
	return fmt.Appendf(out, `\u%04x`, r)
}
