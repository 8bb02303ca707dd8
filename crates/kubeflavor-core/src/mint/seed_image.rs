//! A NoCloud seed image: what a hypervisor attaches as is for cloud-init to read before the
//! first boot. A FAT volume labelled `CIDATA` holding `user-data` and `meta-data` (cloud-init's
//! NoCloud datasource looks for the label `cidata` in either case), built in memory.

use std::io::{Cursor, Write};

/// The image's size: FAT12's floor is far above any user-data the API hands out (its
/// request body is bounded), and 1 MiB attaches anywhere.
pub const SEED_IMAGE_BYTES: usize = 1024 * 1024;
/// The volume label cloud-init looks for (FAT labels are 11 bytes, upper case).
pub const VOLUME_LABEL: [u8; 11] = *b"CIDATA     ";

/// Why no image was built.
#[derive(Debug, thiserror::Error)]
pub enum SeedImageError {
    #[error(
        "the user-data and meta-data ({0} bytes) do not fit a {SEED_IMAGE_BYTES}-byte seed image"
    )]
    TooLarge(usize),
    #[error("building the seed image failed: {0}")]
    Fat(#[from] std::io::Error),
}

/// `meta-data` naming the machine: an instance id (a new one makes cloud-init run again)
/// and its hostname, which the kubelet registers as the Node's name.
pub fn meta_data(instance_id: &str, hostname: &str) -> String {
    format!("instance-id: {instance_id}\nlocal-hostname: {hostname}\n")
}

/// The seed image holding `user_data` and `meta_data`.
pub fn nocloud(user_data: &str, meta_data: &str) -> Result<Vec<u8>, SeedImageError> {
    let payload = user_data.len() + meta_data.len();
    if payload > SEED_IMAGE_BYTES / 2 {
        return Err(SeedImageError::TooLarge(payload));
    }
    let mut image = vec![0u8; SEED_IMAGE_BYTES];
    fatfs::format_volume(
        Cursor::new(&mut image[..]),
        fatfs::FormatVolumeOptions::new()
            .volume_label(VOLUME_LABEL)
            .fat_type(fatfs::FatType::Fat12),
    )?;
    {
        let fs = fatfs::FileSystem::new(Cursor::new(&mut image[..]), fatfs::FsOptions::new())?;
        let root = fs.root_dir();
        for (name, text) in [("user-data", user_data), ("meta-data", meta_data)] {
            let mut file = root.create_file(name)?;
            file.truncate()?;
            file.write_all(text.as_bytes())?;
            file.flush()?;
        }
        drop(root);
        fs.unmount()?;
    }
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn read(image: &mut [u8], name: &str) -> String {
        let fs = fatfs::FileSystem::new(Cursor::new(image), fatfs::FsOptions::new()).unwrap();
        let mut text = String::new();
        fs.root_dir()
            .open_file(name)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        text
    }

    #[test]
    fn the_image_is_a_cidata_volume_with_both_files() {
        let user_data = "#cloud-config\nruncmd: [[echo, hi]]\n";
        let meta = meta_data("kubeflavor-abcdef", "node-1");
        let mut image = nocloud(user_data, &meta).unwrap();
        assert_eq!(image.len(), SEED_IMAGE_BYTES);
        {
            let fs = fatfs::FileSystem::new(Cursor::new(&mut image[..]), fatfs::FsOptions::new())
                .unwrap();
            assert_eq!(fs.volume_label().trim_end(), "CIDATA");
            assert_eq!(fs.fat_type(), fatfs::FatType::Fat12);
            let mut names: Vec<String> = fs
                .root_dir()
                .iter()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            assert_eq!(names, ["meta-data", "user-data"]);
        }
        assert_eq!(read(&mut image, "user-data"), user_data);
        assert_eq!(
            read(&mut image, "meta-data"),
            "instance-id: kubeflavor-abcdef\nlocal-hostname: node-1\n"
        );
        // The boot sector's label too (what blkid reads).
        assert_eq!(&image[43..54], &VOLUME_LABEL);
    }

    #[test]
    fn an_oversized_document_is_refused() {
        let big = "x".repeat(SEED_IMAGE_BYTES);
        assert!(matches!(
            nocloud(&big, ""),
            Err(SeedImageError::TooLarge(_))
        ));
    }
}
