//! POSIX TZ strings (`CET-1CEST,M3.5.0,M10.5.0/3`): the footer of TZif files and the `TZ` variable. Evaluates the
//! offset and abbreviation in effect at a UTC instant, DST rules included (`Jn`, `n`, `Mm.w.d`, optional `/time`).

struct Cursor<'a> {
    s: &'a str,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.s.chars().next()
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.s = &self.s[c.len_utf8()..];
            true
        } else {
            false
        }
    }
    fn name(&mut self) -> Option<&'a str> {
        if self.eat('<') {
            let end = self.s.find('>')?;
            let n = &self.s[..end];
            self.s = &self.s[end + 1..];
            return Some(n);
        }
        let end = self
            .s
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(self.s.len());
        let n = &self.s[..end];
        self.s = &self.s[end..];
        (n.len() >= 3).then_some(n)
    }
    fn num(&mut self) -> Option<i64> {
        let end = self
            .s
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(self.s.len());
        if end == 0 {
            return None;
        }
        let v = self.s[..end].parse().ok()?;
        self.s = &self.s[end..];
        Some(v)
    }
    /// `[+-]hh[:mm[:ss]]` in seconds (sign as written).
    fn hms(&mut self) -> Option<i64> {
        let sign = if self.eat('-') {
            -1
        } else {
            self.eat('+');
            1
        };
        let h = self.num()?;
        let m = if self.eat(':') { self.num()? } else { 0 };
        let s = if self.eat(':') { self.num()? } else { 0 };
        Some(sign * (h * 3600 + m * 60 + s))
    }
}

#[derive(Debug, Clone, Copy)]
enum Rule {
    /// `Jn`: day 1..=365, Feb 29 never counted.
    Julian1(i64),
    /// `n`: day 0..=365, Feb 29 counted.
    Julian0(i64),
    /// `Mm.w.d`.
    Month(i64, i64, i64),
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since the epoch of the rule's date in year `y`.
fn rule_day(r: Rule, y: i64) -> i64 {
    let jan1 = days_from_civil(y, 1, 1);
    match r {
        Rule::Julian1(n) => jan1 + n - 1 + i64::from(is_leap(y) && n >= 60),
        Rule::Julian0(n) => jan1 + n,
        Rule::Month(m, w, d) => {
            let first = days_from_civil(y, m, 1);
            let wd_first = (first + 4).rem_euclid(7); // 1970-01-01 was a Thursday
            let mut day = 1 + (d - wd_first).rem_euclid(7) + (w - 1) * 7;
            while day > days_in_month(y, m) {
                day -= 7;
            }
            first + day - 1
        }
    }
}

fn parse_rule(c: &mut Cursor<'_>) -> Option<(Rule, i64)> {
    let r = if c.eat('J') {
        Rule::Julian1(c.num()?)
    } else if c.eat('M') {
        let m = c.num()?;
        c.eat('.').then_some(())?;
        let w = c.num()?;
        c.eat('.').then_some(())?;
        Rule::Month(m, w, c.num()?)
    } else {
        Rule::Julian0(c.num()?)
    };
    let t = if c.eat('/') { c.hms()? } else { 7200 };
    Some((r, t))
}

/// Offset (seconds east of UTC) and abbreviation in effect at `now` (UTC seconds).
pub fn eval(tz: &str, now: i64) -> Option<(i64, Option<String>)> {
    let mut c = Cursor { s: tz };
    let std_name = c.name()?;
    let std_off = -c.hms()?;
    if c.s.is_empty() {
        return Some((std_off, Some(std_name.to_owned())));
    }
    let dst_name = c.name()?;
    let dst_off = if c.peek().is_some_and(|ch| ch != ',') {
        -c.hms()?
    } else {
        std_off + 3600
    };
    let (start, end) = if c.eat(',') {
        let s = parse_rule(&mut c)?;
        c.eat(',').then_some(())?;
        (s, parse_rule(&mut c)?)
    } else {
        // POSIX default (US rules).
        ((Rule::Month(3, 2, 0), 7200), (Rule::Month(11, 1, 0), 7200))
    };
    let year = {
        let days = (now + std_off).div_euclid(86_400);
        let mut y = 1970 + days.div_euclid(366);
        while days_from_civil(y + 1, 1, 1) <= days {
            y += 1;
        }
        y
    };
    let start_utc = rule_day(start.0, year) * 86_400 + start.1 - std_off;
    let end_utc = rule_day(end.0, year) * 86_400 + end.1 - dst_off;
    let in_dst = if start_utc < end_utc {
        now >= start_utc && now < end_utc
    } else {
        !(now >= end_utc && now < start_utc)
    };
    Some(if in_dst {
        (dst_off, Some(dst_name.to_owned()))
    } else {
        (std_off, Some(std_name.to_owned()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i64, m: i64, d: i64, h: i64) -> i64 {
        days_from_civil(y, m, d) * 86_400 + h * 3600
    }

    #[test]
    fn rules() {
        let berlin = "CET-1CEST,M3.5.0,M10.5.0/3";
        assert_eq!(
            eval(berlin, at(2026, 1, 15, 12)),
            Some((3600, Some("CET".into())))
        );
        assert_eq!(
            eval(berlin, at(2026, 7, 1, 12)),
            Some((7200, Some("CEST".into())))
        );
        // 2026-03-29 01:00 UTC is the switch; one hour earlier is still CET
        assert_eq!(eval(berlin, at(2026, 3, 29, 0)).unwrap().0, 3600);
        assert_eq!(eval(berlin, at(2026, 3, 29, 1)).unwrap().0, 7200);
        let ny = "EST5EDT,M3.2.0,M11.1.0";
        assert_eq!(
            eval(ny, at(2026, 11, 29, 12)),
            Some((-18000, Some("EST".into())))
        );
        assert_eq!(
            eval(ny, at(2026, 6, 1, 12)),
            Some((-14400, Some("EDT".into())))
        );
        let sydney = "AEST-10AEDT,M10.1.0,M4.1.0/3";
        assert_eq!(
            eval(sydney, at(2026, 11, 29, 0)),
            Some((39600, Some("AEDT".into())))
        );
        assert_eq!(
            eval(sydney, at(2026, 6, 1, 0)),
            Some((36000, Some("AEST".into())))
        );
        assert_eq!(eval("<+0530>-5:30", 0), Some((19800, Some("+0530".into()))));
        assert_eq!(eval("UTC0", 0), Some((0, Some("UTC".into()))));
        assert_eq!(eval("x", 0), None);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(
            rule_day(Rule::Julian1(60), 2024),
            days_from_civil(2024, 3, 1)
        );
    }
}
