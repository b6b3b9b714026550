package flow

import "time"

// appendTime appends t in UTC as time.RFC3339Nano writes it (trailing zeros
// of the fraction trimmed, no fraction for a whole second). The standard
// AppendFormat was a third of the JSON encoding's cost (its general integer
// padding); this writes digit pairs from a table. Years outside 0..9999,
// which RFC 3339 cannot spell, take the standard path.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	hour, minute, sec := t.Clock()
	b = appendPair(b, year/100)
	b = appendPair(b, year%100)
	b = append(b, '-')
	b = appendPair(b, int(month))
	b = append(b, '-')
	b = appendPair(b, day)
	b = append(b, 'T')
	b = appendPair(b, hour)
	b = append(b, ':')
	b = appendPair(b, minute)
	b = append(b, ':')
	b = appendPair(b, sec)
	if ns := t.Nanosecond(); ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i > 0; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, 'Z')
}

const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// appendPair appends v (0..99) as two digits.
func appendPair(b []byte, v int) []byte {
	return append(b, digitPairs[2*v], digitPairs[2*v+1])
}
