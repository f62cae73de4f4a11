package pipeline

import "fmt"

func fmtSscanf(s string, y, m, d *int) (int, error) { return fmt.Sscanf(s, "%d-%d-%d", y, m, d) }

// daysFromCivil converts a proleptic Gregorian date to days since 1970-01-01.
func daysFromCivil(y, m, d int) int {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}
