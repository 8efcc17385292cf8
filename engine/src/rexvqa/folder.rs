//! A picked dataset folder: which of its paths are split files, what each split is called, and
//! the keys its images are found under.

/// Where ReXGradient-160K's images live, relative to the dataset root.
pub const IMAGE_ROOT: &str = "deid_png/";

/// The keys a picked file is indexed under. A folder pick names files from the chosen folder
/// (`ReXVQA/deid_png/…`) while split files name images from the dataset root (`deid_png/…`),
/// so an image is indexed both ways.
pub fn index_keys(picked: &str) -> Vec<String> {
    let p = picked.trim_start_matches("./");
    let mut keys = vec![p.to_string()];
    if let Some(i) = p.find(IMAGE_ROOT).filter(|&i| i > 0) {
        keys.push(p[i..].to_string());
    }
    keys
}

/// Whether an indexed key is one of the dataset's PNG images.
pub fn is_image_key(key: &str) -> bool {
    key.starts_with(IMAGE_ROOT) && key.ends_with(".png")
}

/// Whether a path may be a split file.
pub fn is_split_file(path: &str) -> bool {
    path.ends_with(".json")
}

/// The split a split file holds, from its name: `metadata/test_vqa_data.json` → `test`.
pub fn split_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.trim_end_matches(".json")
        .trim_end_matches("_vqa_data")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_files_are_named_after_their_file_without_the_vqa_suffix() {
        assert_eq!(split_name("ReXVQA/metadata/test_vqa_data.json"), "test");
        assert_eq!(split_name("valid_vqa_data.json"), "valid");
        // Other JSON files keep their stem.
        assert_eq!(split_name("metadata/mine.json"), "mine");
    }

    #[test]
    fn images_of_a_folder_pick_are_also_indexed_from_the_dataset_root() {
        assert_eq!(
            index_keys("./ReXVQA/deid_png/p/1.png"),
            ["ReXVQA/deid_png/p/1.png", "deid_png/p/1.png"]
        );
        // Already relative to the root: one key.
        assert_eq!(index_keys("deid_png/p/1.png"), ["deid_png/p/1.png"]);
        assert_eq!(
            index_keys("metadata/test_vqa_data.json"),
            ["metadata/test_vqa_data.json"]
        );
    }

    #[test]
    fn only_pngs_under_the_image_root_count_as_images() {
        assert!(is_image_key("deid_png/p/1.png"));
        assert!(!is_image_key("ReXVQA/deid_png/p/1.png"));
        assert!(!is_image_key("deid_png/p/notes.txt"));
        assert!(is_split_file("metadata/test_vqa_data.json"));
        assert!(!is_split_file("deid_png/p/1.png"));
    }
}
