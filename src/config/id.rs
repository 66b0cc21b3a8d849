use crate::Error;

/// 18 random bytes make 24 base64 characters, the id python-redis-lock generates.
const ID_BYTES: usize = 18;
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A fresh owner id from the OS random source, base64-encoded like python-redis-lock's.
pub(crate) fn random_id() -> Result<String, Error> {
    let mut bytes = [0u8; ID_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| Error::Random(e.to_string()))?;
    Ok(base64(&bytes))
}

/// `len` random hex digits from the OS random source (a process's id in the queues); an OS
/// that gives none gives the time's digits instead, which still differ between processes.
pub(crate) fn random_hex(len: usize) -> String {
    let mut bytes = vec![0u8; len.div_ceil(2)];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let seed = nanos ^ u128::from(std::process::id()) << 64;
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = (seed >> (8 * (i % 16))) as u8;
        }
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex[..len].to_owned()
}

/// Standard base64 of whole 3-byte groups (the id length is a multiple of 3, so no padding).
fn base64(bytes: &[u8]) -> String {
    bytes
        .chunks_exact(3)
        .flat_map(|group| {
            let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
            [18, 12, 6, 0].map(|shift| char::from(ALPHABET[(n >> shift & 63) as usize]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(&[0xfb, 0xff, 0xbf]), "+/+/");
    }

    #[test]
    fn random_ids_are_24_base64_characters_and_differ() {
        let a = random_id().unwrap();
        let b = random_id().unwrap();
        assert_eq!(a.len(), 24);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)));
        assert_ne!(a, b);
    }
}
