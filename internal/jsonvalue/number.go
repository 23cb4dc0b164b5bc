package jsonvalue

import (
	"errors"
	"strconv"
	"strings"
)

// canonicalNumber returns the canonical form of s, a JSON number (as
// json.Decoder's Token returns it, so its syntax is valid): "0" for zero,
// whatever its sign and spelling, and otherwise the sign, the significant
// digits without leading or trailing zeros, "e" and the exponent that
// makes them the number, as a decimal without leading zeros (1.50e2 and
// 150 are both "15e1"). Two numbers are equal exactly when their forms
// are. It takes time and space linear in len(s): the exponent, however
// long, is added to by string arithmetic, never expanded.
func canonicalNumber(s string) (number, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	trimmed := strings.TrimRight(digits, "0")
	if trimmed == "" {
		return "0", nil
	}
	// The number is digits × 10^(exp - len(frac)); each trailing zero cut
	// from digits moves the point one place.
	shift := int64(len(digits)-len(trimmed)) - int64(len(frac))
	expNeg := strings.HasPrefix(exp, "-")
	exp = strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
	e, err := addExponent(expNeg, exp, shift)
	if err != nil {
		return "", err
	}
	sign := ""
	if neg {
		sign = "-"
	}
	return number(sign + trimmed + "e" + e), nil
}

// addExponent returns the decimal of (-1 if neg) × digits + d, where
// digits is a decimal without leading zeros ("" for 0) and |d| is at most
// the length of the number it came from.
func addExponent(neg bool, digits string, d int64) (string, error) {
	if len(digits) <= 18 {
		e, _ := strconv.ParseInt("0"+digits, 10, 64) // fits: below 10^18
		if neg {
			e = -e
		}
		return strconv.FormatInt(e+d, 10), nil // |e|+|d| < 2^63
	}
	// |digits| >= 10^18 > |d|: the sum has the exponent's sign, and its
	// magnitude is |digits| + |d| or |digits| - |d|.
	if d > 1e17 || d < -1e17 {
		return "", errors.New("jsonvalue: a number too long to compare")
	}
	mag := digits
	if (d < 0) == neg {
		mag = addMagnitude(digits, uint64(abs(d)))
	} else {
		mag = subMagnitude(digits, uint64(abs(d)))
	}
	if neg {
		return "-" + mag, nil
	}
	return mag, nil
}

func abs(d int64) int64 {
	if d < 0 {
		return -d
	}
	return d
}

// addMagnitude returns the decimal digits + n.
func addMagnitude(digits string, n uint64) string {
	b := []byte(digits)
	for i := len(b) - 1; i >= 0 && n > 0; i-- {
		sum := uint64(b[i]-'0') + n%10
		n /= 10
		if sum >= 10 {
			sum -= 10
			n++ // the carry joins the next place
		}
		b[i] = byte('0' + sum)
	}
	if n > 0 {
		return strconv.FormatUint(n, 10) + string(b)
	}
	return string(b)
}

// subMagnitude returns the decimal digits - n, for digits > n.
func subMagnitude(digits string, n uint64) string {
	b := []byte(digits)
	borrow := uint64(0)
	for i := len(b) - 1; i >= 0 && (n > 0 || borrow > 0); i-- {
		sub := n%10 + borrow
		n /= 10
		d := uint64(b[i] - '0')
		if d < sub {
			d += 10
			borrow = 1
		} else {
			borrow = 0
		}
		b[i] = byte('0' + d - sub)
	}
	return strings.TrimLeft(string(b), "0")
}
