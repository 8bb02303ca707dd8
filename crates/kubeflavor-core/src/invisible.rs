//! Characters that change how text is shown without being seen: control characters (general
//! category Cc), format characters (Cf: bidi embeddings, overrides, isolates and marks,
//! zero-width spaces and joiners, the byte-order mark, tag characters), the line and
//! paragraph separators (Zl, Zp) and the Hangul fillers (letters that render as nothing).
//! Free text an admin later reads on a screen (a token's issued-to) must hold none of them:
//! with U+202E RIGHT-TO-LEFT OVERRIDE, `eve\u{202e}ecila` is shown as `evealice`.
//!
//! Rust's standard library knows Cc (`char::is_control`) but not Cf, so Cf is the explicit
//! table below (Unicode 18.0: 170 code points in 21 ranges). The set is small and changes
//! rarely (the last addition was U+13439..U+1343F in Unicode 15.0); a Unicode-tables crate
//! would bring thousands of ranges to answer this one question.

/// Every code point of general category Cf, as inclusive ranges, in order (Unicode 18.0).
pub const FORMAT_CHARACTERS: [(u32, u32); 21] = [
    (0x00AD, 0x00AD),   // SOFT HYPHEN
    (0x0600, 0x0605),   // ARABIC NUMBER SIGN .. ARABIC NUMBER MARK ABOVE
    (0x061C, 0x061C),   // ARABIC LETTER MARK
    (0x06DD, 0x06DD),   // ARABIC END OF AYAH
    (0x070F, 0x070F),   // SYRIAC ABBREVIATION MARK
    (0x0890, 0x0891),   // ARABIC POUND MARK ABOVE .. ARABIC PIASTRE MARK ABOVE
    (0x08E2, 0x08E2),   // ARABIC DISPUTED END OF AYAH
    (0x180E, 0x180E),   // MONGOLIAN VOWEL SEPARATOR
    (0x200B, 0x200F),   // ZERO WIDTH SPACE .. RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),   // LEFT-TO-RIGHT EMBEDDING .. RIGHT-TO-LEFT OVERRIDE
    (0x2060, 0x2064),   // WORD JOINER .. INVISIBLE PLUS
    (0x2066, 0x206F),   // LEFT-TO-RIGHT ISOLATE .. NOMINAL DIGIT SHAPES
    (0xFEFF, 0xFEFF),   // ZERO WIDTH NO-BREAK SPACE (byte-order mark)
    (0xFFF9, 0xFFFB),   // INTERLINEAR ANNOTATION ANCHOR .. TERMINATOR
    (0x110BD, 0x110BD), // KAITHI NUMBER SIGN
    (0x110CD, 0x110CD), // KAITHI NUMBER SIGN ABOVE
    (0x13430, 0x1343F), // EGYPTIAN HIEROGLYPH VERTICAL JOINER .. END WALLED ENCLOSURE
    (0x1BCA0, 0x1BCA3), // SHORTHAND FORMAT LETTER OVERLAP .. UP STEP
    (0x1D173, 0x1D17A), // MUSICAL SYMBOL BEGIN BEAM .. END PHRASE
    (0xE0001, 0xE0001), // LANGUAGE TAG
    (0xE0020, 0xE007F), // TAG SPACE .. CANCEL TAG
];

/// U+2028 LINE SEPARATOR (Zl) and U+2029 PARAGRAPH SEPARATOR (Zp): line breaks that
/// `char::is_control` does not see.
const SEPARATORS: [char; 2] = ['\u{2028}', '\u{2029}'];

/// Letters (Lo) that render as blank space of no width or of a letter's width: the Hangul
/// fillers, used to make names that look empty or identical.
const FILLERS: [char; 4] = ['\u{115F}', '\u{1160}', '\u{3164}', '\u{FFA0}'];

/// Whether `c` is a format character (general category Cf).
pub fn is_format(c: char) -> bool {
    let cp = u32::from(c);
    FORMAT_CHARACTERS
        .binary_search_by(|&(first, last)| {
            if last < cp {
                std::cmp::Ordering::Less
            } else if first > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Whether `c` is shown other than as a visible character: Cc, Cf, Zl, Zp or a filler.
pub fn is_invisible(c: char) -> bool {
    c.is_control() || is_format(c) || SEPARATORS.contains(&c) || FILLERS.contains(&c)
}

/// `text` as it may be shown on a screen: every invisible character written as a visible
/// escape (`\u{202e}`), the rest as it is. What a table shows is then what is stored,
/// even for text written before it was checked, or by someone who bypassed the checks.
pub fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_invisible) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_invisible(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_text_escapes_what_would_not_be_seen() {
        assert_eq!(shown("acme-corp/alice"), "acme-corp/alice");
        assert_eq!(shown("eve\u{202e}ecila"), "eve\\u{202e}ecila");
        assert_eq!(shown("a\u{200b}b\tc"), "a\\u{200b}b\\u{9}c");
        assert!(!shown("\u{feff}x\u{2028}").chars().any(is_invisible));
    }
    use proptest::prelude::*;

    #[test]
    fn the_format_table_is_ordered_and_holds_170_code_points() {
        let count: u32 = FORMAT_CHARACTERS.iter().map(|(a, b)| b - a + 1).sum();
        assert_eq!(count, 170);
        for pair in FORMAT_CHARACTERS.windows(2) {
            assert!(pair[0].1 + 1 < pair[1].0, "{pair:x?}: ordered, apart");
        }
        assert!(FORMAT_CHARACTERS.iter().all(|(a, b)| a <= b));
    }

    #[test]
    fn the_characters_the_attacks_use_are_invisible() {
        for c in [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}', '\u{200B}', '\u{200C}',
            '\u{200D}', '\u{FEFF}', '\u{2028}', '\u{2029}', '\u{0}', '\u{7F}', '\u{85}',
        ] {
            assert!(is_invisible(c), "U+{:04X}", u32::from(c));
        }
        for c in [
            'a',
            'é',
            '東',
            '\u{5D0}',
            ' ',
            '\u{3000}',
            '\u{1F600}',
            '\u{200A}',
        ] {
            assert!(!is_invisible(c), "U+{:04X}", u32::from(c));
        }
    }

    proptest! {
        /// The binary search agrees with a plain scan of the table.
        #[test]
        fn is_format_agrees_with_a_scan(c in any::<char>()) {
            let cp = u32::from(c);
            let scan = FORMAT_CHARACTERS.iter().any(|&(a, b)| (a..=b).contains(&cp));
            prop_assert_eq!(is_format(c), scan);
        }
    }
}
